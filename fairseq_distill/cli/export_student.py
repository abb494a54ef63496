"""Export a trained student as a clean decoding checkpoint that stock fairseq loads.

    fsd-export-student checkpoints/checkpoint_best.pt student.pt
"""
import argparse

from fairseq_distill.checkpoint import export_decoding_checkpoint
from fairseq_distill.cli.common import run_cli


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    p.add_argument("checkpoint", help="training checkpoint written by fairseq-train")
    p.add_argument("output", help="where to write the decoding checkpoint")
    args = p.parse_args(argv)
    info = run_cli("export_student", lambda: export_decoding_checkpoint(args.checkpoint, args.output))
    print(
        f"[export] {info['path']}: {info['arch']}, {info['parameters']:,} parameters, "
        f"{info['num_updates']} updates; dropped {info['dropped_criterion_tensors']} "
        f"criterion tensors, optimizer state and training progress"
    )


if __name__ == "__main__":
    main()
