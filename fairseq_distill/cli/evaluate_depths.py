"""Evaluate a flexible-depth model (or a LayerDrop model) at every encoder × decoder depth.

    fsd-evaluate-depths CHECKPOINT DATA_BIN --out results/flexible [--beam 4]
    fsd-evaluate-depths LAYERDROP_CHECKPOINT DATA_BIN --out results/layerdrop --prune left

A ``flexible_transformer`` decodes each pair through ``--model-overrides "{'encoder_depth': m,
'decoder_depth': n}"``. With ``--prune STRATEGY`` the checkpoint is an ordinary Transformer
(e.g. trained with fairseq's LayerDrop) pruned at decoding time with fairseq's
``encoder_layers_to_keep``/``decoder_layers_to_keep``, the layers chosen by STRATEGY
(``left`` is LayerDrop's rule). Every pair is scored with sacreBLEU and timed; writes
OUT.json (with each pair's hypothesis file, for paired tests), OUT.md (BLEU, chrF and
tokens/s tables) and OUT.png (BLEU heat map), moved into place together once complete. OUT may
be new or an earlier grid of the same checkpoint and data (of others only with --force), never
another file.
"""
from fairseq_distill.cli.common import cli_parser, run_cli
from fairseq_distill.cli.depth_strategies import depth_list
from fairseq_distill.depth.strategies import STRATEGIES
# the library's, named here for callers of this module (bench/depth_grid.py)
from fairseq_distill.evaluation.depth_grid import depth_overrides, evaluate_depths  # noqa: F401


def main(argv=None):
    p = cli_parser(__doc__)
    p.add_argument("checkpoint")
    p.add_argument("data_bin")
    p.add_argument("--out", required=True, help="output prefix: OUT.json, OUT.md, OUT.png")
    p.add_argument("--prune", choices=STRATEGIES, help="prune an ordinary Transformer with this rule")
    p.add_argument("--encoder-depths", help="comma-separated subset (default: all the model supports)")
    p.add_argument("--decoder-depths", help="comma-separated subset")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--force", action="store_true",
                   help="replace an earlier grid at OUT of another checkpoint or data (one of the same is "
                        "replaced without it; a file that is not a grid, never)")
    args = p.parse_args(argv)

    def body():
        _, table = evaluate_depths(args.checkpoint, args.data_bin, args.out, args.prune, args.beam,
                                   args.batch_size, depth_list(args.encoder_depths, "--encoder-depths"),
                                   depth_list(args.decoder_depths, "--decoder-depths"), force=args.force)
        print(table)
        print(f"[depths] wrote {args.out}.json, {args.out}.md, {args.out}.png")

    run_cli("evaluate_depths", body)


if __name__ == "__main__":
    main()
