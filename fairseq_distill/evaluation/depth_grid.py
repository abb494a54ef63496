"""A flexible-depth model (or a LayerDrop model) evaluated at every encoder × decoder depth:
``fsd-evaluate-depths``'s grid.

A ``flexible_transformer`` decodes each pair through ``--model-overrides "{'encoder_depth': m,
'decoder_depth': n}"``; with a pruning strategy the checkpoint is an ordinary Transformer pruned
at decoding time with fairseq's ``encoder_layers_to_keep``/``decoder_layers_to_keep``. The grid
is written as ``OUT.json`` (its record: checkpoint, data, every pair's scores and hypotheses),
``OUT.md`` (tables) and ``OUT.png`` (BLEU heat map), aside and moved in together, the record
last. ``OUT`` may be new or an earlier grid of the same checkpoint and data (of another only with
``force``); never an input, nor a file this tool did not write.
"""
import json
import os

from fairseq_distill.deploy.checkpoint import load_checkpoint
from fairseq_distill.depth.strategies import DepthError, parse_depths, plan, supported_depths
from fairseq_distill.errors import DistillError
from fairseq_distill.evaluation.evaluate import evaluate
from fairseq_distill.evaluation.plotting import pyplot
from fairseq_distill.workdir import check_earlier_output, check_outputs, files_written_aside

TOOL = "fsd-evaluate-depths"
EXTENSIONS = (".json", ".md", ".png")  # the record first


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


def grid_markdown(rows, title) -> str:
    """The BLEU, chrF and tokens/s tables (rows: encoder depth, columns: decoder depth)."""
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
    return "\n".join(lines)


def draw_grid(rows, path, title):
    """The BLEU heat map, as a PNG at ``path``."""
    enc = sorted({r["encoder_depth"] for r in rows})
    dec = sorted({r["decoder_depth"] for r in rows})
    cell = {(r["encoder_depth"], r["decoder_depth"]): r for r in rows}
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
    try:
        fig.savefig(path, dpi=120, format="png")
    finally:
        plt.close(fig)


def is_grid(record: dict) -> bool:
    """A record this tool wrote (before it said so, a grid's record held these keys)."""
    return record.get("tool") == TOOL or (isinstance(record.get("rows"), list) and "checkpoint" in record
                                          and "prune" in record)


def check_grid_outputs(checkpoint: str, data_bin: str, out: str, force: bool = False):
    """``OUT.json``, ``.md`` and ``.png`` may be written: none is, contains or lies inside the
    checkpoint or the data, and what is there is an earlier grid of this checkpoint and data (of
    others with ``force``)."""
    if not os.path.basename(out) or os.path.isdir(out):
        raise DistillError(f"--out '{out}' is a folder; give the grid's path without extension, e.g. "
                           f"{os.path.join(out, 'grid')} for grid.json, grid.md and grid.png there")
    files = [out + ext for ext in EXTENSIONS]
    check_outputs([("--out", f) for f in files], [("CHECKPOINT", checkpoint), ("DATA_BIN", data_bin)])
    model, data = os.path.abspath(checkpoint), os.path.abspath(data_bin)

    def differs(earlier):
        if earlier.get("checkpoint") != model:
            return f"another checkpoint ({earlier.get('checkpoint')})"
        if earlier.get("data", data) != data:
            return f"other data ({earlier['data']})"
        return None

    check_earlier_output("--out", out, files, TOOL, "the depth grid", is_grid, differs, force)


def evaluate_depths(checkpoint, data_bin, out, prune=None, beam=4, batch_size=128, encoder_depths=None,
                    decoder_depths=None, title=None, force=False):
    """Evaluate every depth pair and write the grid (see the module docstring); returns (rows, the
    Markdown tables)."""
    check_grid_outputs(checkpoint, data_bin, out, force)
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
    title = title or os.path.basename(out)
    table = grid_markdown(rows, title)
    record = {"tool": TOOL, "checkpoint": os.path.abspath(checkpoint), "data": os.path.abspath(data_bin),
              "prune": prune, "beam": beam, "batch_size": batch_size, "rows": rows}
    with files_written_aside(out + ".md", out + ".png", out + ".json") as (md, png, record_path):
        with open(md, "w", encoding="utf-8") as f:
            f.write(table)
        draw_grid(rows, png, title)
        with open(record_path, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)
    return rows, table
