"""Compare the depth strategies of a flexible-depth model: task balance and layer distance.

    fsd-depth-strategies --encoder-layers 12 --decoder-layers 6 [--show]

TB (task balance): sample standard deviation over layers of the number of depths whose
sub-network uses the layer (lower: layers shared more evenly). ALD (average layer distance):
mean gap between adjacent layers of a sub-network (1 = contiguous). ``--show`` also lists
every sub-network (1-based layer numbers).
"""

from fairseq_distill.cli.common import cli_parser, run_cli
from fairseq_distill.depth.strategies import (STRATEGIES, DepthError, average_layer_distance, plan,
                                              supported_depths, task_balance)
from fairseq_distill.errors import DistillError


def depth_list(value, flag):
    """A comma-separated list of depths such as 2,3,6 (None when not given)."""
    if not value:
        return None
    try:
        return [int(x) for x in value.split(",")]
    except ValueError:
        raise DistillError(f"{flag} '{value}': expected whole numbers separated by commas, such as 2,3,6") from None


def build_parser():
    p = cli_parser(__doc__)
    p.add_argument("--encoder-layers", type=int, required=True)
    p.add_argument("--decoder-layers", type=int)
    p.add_argument("--encoder-depths", help="comma-separated subset of the divisors (default: all)")
    p.add_argument("--decoder-depths", help="comma-separated subset of the divisors (default: all)")
    p.add_argument("--show", action="store_true", help="print every sub-network")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    run_cli("depth_strategies", lambda: compare(args))


def compare(args):
    sides = [("encoder", args.encoder_layers, depth_list(args.encoder_depths, "--encoder-depths"))]
    if args.decoder_layers:
        sides.append(("decoder", args.decoder_layers, depth_list(args.decoder_depths, "--decoder-depths")))
    try:
        depths = {side: supported_depths(n, wanted, side) for side, n, wanted in sides}
        plans = {(s, side): plan(n, depths[side], s) for s in STRATEGIES for side, n, _ in sides}
    except DepthError as e:
        raise DistillError(str(e)) from None
    head = "| strategy | " + " | ".join(f"{side} TB | {side} ALD" for side, _, _ in sides) + " |"
    print("depths: " + "; ".join(f"{side} ({n} layers) {depths[side]}" for side, n, _ in sides))
    print(head)
    print("|---|" + "---|---|" * len(sides))
    for s in STRATEGIES:
        cells = []
        for side, n, _ in sides:
            sub = plans[(s, side)]
            cells += [f"{task_balance(n, sub):.3f}", f"{average_layer_distance(sub):.3f}"]
        print(f"| {s} | " + " | ".join(cells) + " |")
    if args.show:
        for s in STRATEGIES:
            for side, _, _ in sides:
                listing = "; ".join(f"{d}: {[i + 1 for i in layers]}" for d, layers in plans[(s, side)].items())
                print(f"{s:12s} {side}: {listing}")


if __name__ == "__main__":
    main()
