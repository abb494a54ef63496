"""Compare the depth strategies of a flexible-depth model: task balance and layer distance.

    fsd-depth-strategies --encoder-layers 12 --decoder-layers 6 [--show]

TB (task balance): sample standard deviation over layers of the number of depths whose
sub-network uses the layer (lower: layers shared more evenly). ALD (average layer distance):
mean gap between adjacent layers of a sub-network (1 = contiguous). ``--show`` also lists
every sub-network (1-based layer numbers).
"""
import argparse
import sys

from fairseq_distill.depth_strategies import (STRATEGIES, DepthError, average_layer_distance, plan,
                                              supported_depths, task_balance)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--encoder-layers", type=int, required=True)
    p.add_argument("--decoder-layers", type=int)
    p.add_argument("--encoder-depths", help="comma-separated subset of the divisors (default: all)")
    p.add_argument("--decoder-depths", help="comma-separated subset of the divisors (default: all)")
    p.add_argument("--show", action="store_true", help="print every sub-network")
    args = p.parse_args(argv)
    sides = [("encoder", args.encoder_layers, args.encoder_depths)]
    if args.decoder_layers:
        sides.append(("decoder", args.decoder_layers, args.decoder_depths))
    try:
        depths = {side: supported_depths(n, [int(x) for x in wanted.split(",")] if wanted else None, side)
                  for side, n, wanted in sides}
        plans = {(s, side): plan(n, depths[side], s) for s in STRATEGIES for side, n, _ in sides}
    except (DepthError, ValueError) as e:
        sys.exit(f"depth_strategies: error: {e}")
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
