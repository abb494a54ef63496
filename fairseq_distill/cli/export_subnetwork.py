"""Export one (encoder depth, decoder depth) sub-network of a flexible-depth model as an
ordinary ``transformer`` checkpoint that stock ``fairseq-generate`` loads (no --user-dir).

    fsd-export-subnetwork CHECKPOINT OUT.pt --encoder-depth 6 --decoder-depth 3
"""

from fairseq_distill.cli.common import cli_parser, run_cli
from fairseq_distill.depth.extraction import extract_subnetwork


def main(argv=None):
    p = cli_parser(__doc__)
    p.add_argument("checkpoint", help="a flexible_transformer checkpoint")
    p.add_argument("output")
    p.add_argument("--encoder-depth", type=int, help="default: the largest")
    p.add_argument("--decoder-depth", type=int, help="default: the largest")
    args = p.parse_args(argv)
    info = run_cli("export_subnetwork", lambda: extract_subnetwork(args.checkpoint, args.output, args.encoder_depth,
                                                                   args.decoder_depth))
    print(f"[export] {info['path']}: transformer {len(info['kept']['encoder'])}+{len(info['kept']['decoder'])} "
          f"(encoder layers {info['kept']['encoder']}, decoder layers {info['kept']['decoder']}), "
          f"{info['parameters']:,} parameters; loads and runs (checked)")


if __name__ == "__main__":
    main()
