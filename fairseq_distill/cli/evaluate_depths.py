"""Evaluate a flexible-depth model (or a LayerDrop model) at every encoder × decoder depth.

    fsd-evaluate-depths CHECKPOINT DATA_BIN --out results/flexible [--beam 4]
    fsd-evaluate-depths LAYERDROP_CHECKPOINT DATA_BIN --out results/layerdrop --prune left

A ``flexible_transformer`` decodes each pair through ``--model-overrides "{'encoder_depth': m,
'decoder_depth': n}"``. With ``--prune STRATEGY`` the checkpoint is an ordinary Transformer
(e.g. trained with fairseq's LayerDrop) pruned at decoding time with fairseq's
``encoder_layers_to_keep``/``decoder_layers_to_keep``, the layers chosen by STRATEGY
(``left`` is LayerDrop's rule). Every pair is scored with sacreBLEU and timed; writes
OUT.json (with each pair's hypothesis file, for paired tests), OUT.md (BLEU, chrF and
tokens/s tables) and OUT.png (BLEU heat map).
"""
import json
import os

from fairseq_distill.deploy.checkpoint import load_checkpoint
from fairseq_distill.cli.common import cli_parser, run_cli
from fairseq_distill.cli.depth_strategies import depth_list
from fairseq_distill.evaluation.evaluate import evaluate
from fairseq_distill.evaluation.plotting import pyplot
from fairseq_distill.depth.strategies import STRATEGIES, DepthError, parse_depths, plan, supported_depths
from fairseq_distill.errors import DistillError


def depth_overrides(model_cfg, prune, encoder_depths=None, decoder_depths=None):
    """(m, n) -> the --model-overrides dict that decodes that pair."""
    layers = {side: int(getattr(model_cfg, f"{side}_layers")) for side in ("encoder", "decoder")}
    wanted = {"encoder": encoder_depths, "decoder": decoder_depths}
    if prune is None:
        arch = getattr(model_cfg, "arch", None) or getattr(model_cfg, "_name", None)
        if not str(arch).startswith("flexible_transformer"):
            raise DistillError(f"'{arch}' is not a flexible_transformer; for an ordinary Transformer "
                               f"pass --prune left (LayerDrop's rule) or another strategy")
        depths = {side: supported_depths(layers[side], wanted[side] or parse_depths(
            getattr(model_cfg, f"{side}_depths", None)), side) for side in layers}
        return {(m, n): {"encoder_depth": m, "decoder_depth": n}
                for m in depths["encoder"] for n in depths["decoder"]}
    keep = {side: plan(layers[side], supported_depths(layers[side], wanted[side], side), prune) for side in layers}
    return {(m, n): {"encoder_layers_to_keep": ",".join(map(str, keep["encoder"][m])),
                     "decoder_layers_to_keep": ",".join(map(str, keep["decoder"][n]))}
            for m in keep["encoder"] for n in keep["decoder"]}


def write_tables(rows, out, title):
    enc = sorted({r["encoder_depth"] for r in rows})
    dec = sorted({r["decoder_depth"] for r in rows})
    cell = {(r["encoder_depth"], r["decoder_depth"]): r for r in rows}
    lines = [f"# {title}", ""]
    for key, fmt, name in (("bleu", "{:.2f}", "BLEU"), ("chrf", "{:.2f}", "chrF"),
                           ("tokens_per_second", "{:.0f}", "tokens/s")):
        if not all(key in r for r in rows):
            continue  # chrF: grids written before it was kept
        lines += [f"{name} (rows: encoder depth, columns: decoder depth)", "",
                  "| enc \\ dec | " + " | ".join(map(str, dec)) + " |", "|---|" + "---|" * len(dec)]
        lines += [f"| {m} | " + " | ".join(fmt.format(cell[(m, n)][key]) if (m, n) in cell else "-" for n in dec)
                  + " |" for m in enc]
        lines.append("")
    with open(out + ".md", "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    plt = pyplot()
    grid = [[cell[(m, n)]["bleu"] if (m, n) in cell else float("nan") for n in dec] for m in enc]
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(dec), 1.0 + 0.6 * len(enc)))
    image = ax.imshow(grid, cmap="viridis", aspect="auto", origin="lower")
    ax.set_xticks(range(len(dec)), [str(n) for n in dec])
    ax.set_yticks(range(len(enc)), [str(m) for m in enc])
    ax.set_xlabel("decoder depth")
    ax.set_ylabel("encoder depth")
    for i, m in enumerate(enc):
        for j, n in enumerate(dec):
            if (m, n) in cell:
                ax.text(j, i, f"{cell[(m, n)]['bleu']:.1f}", ha="center", va="center", color="white", fontsize=8)
    fig.colorbar(image, ax=ax, label="BLEU")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out + ".png", dpi=120)
    plt.close(fig)
    return "\n".join(lines)


def evaluate_depths(checkpoint, data_bin, out, prune=None, beam=4, batch_size=128, encoder_depths=None,
                    decoder_depths=None, title=None):
    model_cfg = load_checkpoint(checkpoint)["cfg"]["model"]
    try:
        pairs = depth_overrides(model_cfg, prune, encoder_depths, decoder_depths)
    except DepthError as e:
        raise DistillError(str(e)) from None
    rows = []
    for (m, n), overrides in pairs.items():
        r = evaluate(checkpoint, data_bin, "test", beam=beam, batch_size=batch_size,
                     extra_args=["--model-overrides", repr(overrides)], tag=f"e{m}d{n}")
        rows.append({"encoder_depth": m, "decoder_depth": n, "bleu": r["bleu"], "chrf": r["chrf"],
                     "tokens_per_second": r["tokens_per_second"], "sentences_per_second": r["sentences_per_second"],
                     "overrides": overrides, "bleu_signature": r["bleu_signature"],
                     "chrf_signature": r["chrf_signature"],
                     # kept for paired tests between depths and models
                     "hypotheses": r["hypotheses"], "references": r["references"]})
        print(f"[depths] encoder {m}, decoder {n}: BLEU {r['bleu']:.2f}, {r['tokens_per_second']:.0f} tokens/s",
              flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".json", "w", encoding="utf-8") as f:
        json.dump({"checkpoint": os.path.abspath(checkpoint), "prune": prune, "beam": beam,
                   "batch_size": batch_size, "rows": rows}, f, indent=2)
    table = write_tables(rows, out, title or os.path.basename(out))
    return rows, table


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
    args = p.parse_args(argv)

    def body():
        _, table = evaluate_depths(args.checkpoint, args.data_bin, args.out, args.prune, args.beam,
                                   args.batch_size, depth_list(args.encoder_depths, "--encoder-depths"),
                                   depth_list(args.decoder_depths, "--decoder-depths"))
        print(table)
        print(f"[depths] wrote {args.out}.json, {args.out}.md, {args.out}.png")

    run_cli("evaluate_depths", body)


if __name__ == "__main__":
    main()
