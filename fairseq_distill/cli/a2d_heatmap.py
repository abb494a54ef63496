"""Heat maps of A2D's learned Attention Alignment Modules (like Jin et al., Figure 2).

    fsd-a2d-heatmap checkpoints/checkpoint_last.pt --out a2d.png

Reads the criterion state of an ``a2d`` training checkpoint (no data, no teacher needed)
and draws, per attention type, the AAM weight matrix: one row per teacher head, one column
per student head, both labelled layer.head, with lines between layers. Writes the PNG and
the matrices as JSON next to it (``STEM.json``), both moved into place once complete; they may
replace an earlier heat map of this tool, never another file nor the checkpoint.
"""
from fairseq_distill.deploy.checkpoint import load_training_checkpoint
from fairseq_distill.cli.common import cli_parser, run_cli
from fairseq_distill.terms.registry import upgrade_criterion_keys
from fairseq_distill.errors import DistillError
from fairseq_distill.features import ATTENTION_TYPES
from fairseq_distill.evaluation.plotting import check_heatmap_outputs, pyplot, write_heatmap


def alignment_matrices(checkpoint: str) -> dict:
    """``{type: {"weight": [[...]], "student": [layers, heads], "teacher": [layers, heads]}}``."""
    criterion = upgrade_criterion_keys(load_training_checkpoint(checkpoint, "a2d")["criterion"], ["a2d"])
    matrices = {}
    for kind in ATTENTION_TYPES:
        prefix = f"terms.a2d.aams.{kind}."
        if prefix + "weight" not in criterion:
            continue
        matrices[kind] = {
            "weight": [[round(float(w), 5) for w in row] for row in criterion[prefix + "weight"].float()],
            "bias": [round(float(b), 5) for b in criterion[prefix + "bias"].float()],
            "student": criterion[prefix + "student_layout"].tolist(),
            "teacher": criterion[prefix + "teacher_layout"].tolist(),
        }
    if not matrices:
        raise DistillError(f"{checkpoint}: the a2d criterion state holds no alignment module")
    return matrices


def head_labels(layers: int, heads: int):
    return [f"{layer + 1}.{head + 1}" for layer in range(layers) for head in range(heads)]


def plot(matrices: dict, out_png: str):
    plt = pyplot()
    kinds = list(matrices)
    fig, axes = plt.subplots(1, len(kinds), figsize=(5 * len(kinds), 5), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        m = matrices[kind]
        (ls, hs), (lt, ht) = m["student"], m["teacher"]
        limit = max(abs(w) for row in m["weight"] for w in row) or 1.0
        image = ax.imshow(m["weight"], cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
        ax.set_xticks(range(ls * hs))
        ax.set_xticklabels(head_labels(ls, hs), rotation=90, fontsize=7)
        ax.set_yticks(range(lt * ht))
        ax.set_yticklabels(head_labels(lt, ht), fontsize=7)
        for layer in range(1, ls):
            ax.axvline(layer * hs - 0.5, color="k", linewidth=0.8)
        for layer in range(1, lt):
            ax.axhline(layer * ht - 0.5, color="k", linewidth=0.8)
        ax.set_xlabel("student head (layer.head)")
        ax.set_ylabel("teacher head (layer.head)")
        ax.set_title(f"A2D alignment: {kind.replace('_', ' ')}")
        fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    try:
        fig.savefig(out_png, dpi=120)
    finally:
        plt.close(fig)


def is_a2d_heatmap(record: dict) -> bool:
    """The JSON this tool writes: per attention type, its alignment module's weights and layouts."""
    return bool(record) and all(kind in ATTENTION_TYPES and isinstance(m, dict)
                                and {"weight", "bias", "student", "teacher"} <= set(m) for kind, m in record.items())


def main(argv=None):
    p = cli_parser(__doc__, full_doc=False)
    p.add_argument("checkpoint", help="training checkpoint of an a2d run")
    p.add_argument("--out", required=True, help="PNG path (the matrices go to the same name .json)")
    args = p.parse_args(argv)

    def body():
        record, replaced = check_heatmap_outputs(args.out, [("CHECKPOINT", args.checkpoint)], "fsd-a2d-heatmap",
                                                 is_a2d_heatmap)
        matrices = alignment_matrices(args.checkpoint)
        write_heatmap(args.out, record, matrices, plot)
        for kind, m in matrices.items():
            print(f"[a2d] {kind}: {m['student'][0]}x{m['student'][1]} student heads -> "
                  f"{m['teacher'][0]}x{m['teacher'][1]} teacher heads")
        print(f"[a2d] wrote {args.out} and {record}" + (f"; replaced the earlier heat map {args.out}" if replaced else ""))

    run_cli("a2d_heatmap", body)


if __name__ == "__main__":
    main()
