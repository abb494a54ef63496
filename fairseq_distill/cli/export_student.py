"""Export a trained student as a clean decoding checkpoint.

    fsd-export-student checkpoints/checkpoint_best.pt student.pt

Students of fairseq's architectures (``transformer``) load in stock fairseq without the
plugin; the plugin's own (``deep_transformer*``, ``flexible_transformer``) need
``--user-dir "$(fsd-options --user-dir)"`` to decode (from any directory), and the export says
which it wrote.
"""

from fairseq_distill.deploy.checkpoint import export_decoding_checkpoint
from fairseq_distill.cli.common import cli_parser, run_cli


def main(argv=None):
    p = cli_parser(__doc__, full_doc=False)
    p.add_argument("checkpoint", help="training checkpoint written by fairseq-train")
    p.add_argument("output", help="where to write the decoding checkpoint")
    args = p.parse_args(argv)
    info = run_cli("export_student", lambda: export_decoding_checkpoint(args.checkpoint, args.output))
    print(
        f"[export] {info['path']}: {info['arch']}, {info['parameters']:,} parameters, "
        f"{info['num_updates']} updates; dropped {info['dropped_criterion_tensors']} "
        f"criterion tensors, optimizer state and training progress"
    )
    if info["needs_plugin"]:
        print(f"[export] {info['arch']} is an architecture of this plugin: decode it with "
              f"fairseq-generate ... --user-dir \"$(fsd-options --user-dir)\" (or fsd-translate); stock fairseq "
              f"without the plugin cannot build it")
    else:
        print("[export] stock fairseq-generate loads it without --user-dir")


if __name__ == "__main__":
    main()
