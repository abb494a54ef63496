"""Heat map of ALP-KD's learned attention over teacher layers (like Passban et al., Fig. 3).

    fsd-alp-heatmap checkpoints/checkpoint_last.pt --out alp.png

Loads a *training* checkpoint of an ``alp_kd`` run (student, criterion state and the
stored teacher path), runs student and teacher over a data set, and averages the
attention weights α over all non-padding positions (or sentences). Writes a PNG (student
layer × teacher layer, one panel per side) and the matrix as JSON next to it (``STEM.json``),
both moved into place once complete; they may replace an earlier heat map of this tool, never
another file, nor the checkpoint, its data or its teacher.
"""
import torch

from fairseq_distill.deploy.checkpoint import load_training_checkpoint
from fairseq_distill.cli.common import cli_parser, run_cli
from fairseq_distill.evaluation.plotting import check_heatmap_outputs, pyplot, write_heatmap
from fairseq_distill.features import run_with_features, stack_shape


def average_alp_weights(checkpoint, data=None, subset="valid", teacher_path=None, max_tokens=4000, state=None):
    """``state``: the checkpoint already loaded (:func:`load_training_checkpoint`)."""
    from fairseq import tasks
    from omegaconf import open_dict

    state = state or load_training_checkpoint(checkpoint, "alp_kd")
    cfg = state["cfg"]
    with open_dict(cfg):
        if data:
            cfg.task.data = data
        if teacher_path:
            cfg.task.teacher_path = teacher_path
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    model.load_state_dict(state["model"], strict=True)
    criterion = task.build_criterion(cfg.criterion)
    criterion.load_state_dict(state["criterion"], strict=True)
    model.eval()
    criterion.eval()

    task.load_dataset(subset)
    itr = task.get_batch_iterator(task.dataset(subset), max_tokens=max_tokens).next_epoch_itr(shuffle=False)
    teacher = task.load_teacher()
    criterion = criterion.terms["alp_kd"]
    request = criterion.request
    sums = {side: {} for side in criterion.sides}  # side -> pair index -> K sums
    counts = {side: {} for side in criterion.sides}
    with torch.no_grad():
        for sample in itr:
            student = run_with_features(model, sample["net_input"], request)
            t = teacher.features(sample["net_input"], request, next(model.parameters()))[0]
            for side in criterion.sides:
                mask = criterion.side_mask(side, student, sample)
                criterion.side_loss(side, student, t, sample)  # fills fuser.last_alpha
                fuser = criterion.fusers[side]
                for i, alpha in fuser.last_alpha.items():  # K x L x B
                    # average over real positions (token) or over sentences
                    if fuser.granularity == "sentence":
                        weights = mask.new_ones(1, mask.size(0))
                    else:
                        weights = mask.t()
                    weights = weights.to(alpha.dtype)
                    sums[side][i] = sums[side].get(i, 0) + (alpha * weights).sum(dim=(1, 2))
                    counts[side][i] = counts[side].get(i, 0) + weights.sum()

    # from the teacher's stated layout: a Hugging Face teacher has no fairseq .layers
    teacher_layers = {side: stack_shape(teacher.models[0])[side][0] for side in criterion.sides}
    matrices = {}
    for side in criterion.sides:
        rows = []
        for i, (j, group) in enumerate(criterion.pairs[side]):
            row = [0.0] * (teacher_layers[side] + 1)
            mean = (sums[side][i] / counts[side][i]).tolist()
            for k, layer in enumerate(group):
                row[layer] = round(mean[k], 4)
            rows.append({"student_layer": j, "weights": row})
        matrices[side] = rows
    return matrices


def plot(matrices, out_png):
    plt = pyplot()
    sides = list(matrices)
    fig, axes = plt.subplots(1, len(sides), figsize=(6 * len(sides), 3), squeeze=False)
    for ax, side in zip(axes[0], sides):
        rows = matrices[side]
        start = 0 if any(r["weights"][0] for r in rows) else 1  # show layer 0 only when used
        grid = [r["weights"][start:] for r in rows]
        image = ax.imshow(grid, cmap="viridis", vmin=0, vmax=1, aspect="auto")
        ax.set_xticks(range(len(grid[0])))
        ax.set_xticklabels([str(k) for k in range(start, start + len(grid[0]))])
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([str(r["student_layer"]) for r in rows])
        ax.set_xlabel("teacher layer")
        ax.set_ylabel("student layer")
        ax.set_title(f"ALP-KD attention ({side})")
        for y, row in enumerate(grid):
            for x, v in enumerate(row):
                ax.text(x, y, f"{v:.2f}", ha="center", va="center", color="w" if v < 0.6 else "k", fontsize=8)
        fig.colorbar(image, ax=ax)
    fig.tight_layout()
    try:
        fig.savefig(out_png, dpi=120)
    finally:
        plt.close(fig)


def is_alp_heatmap(record: dict) -> bool:
    """The JSON this tool writes: per side, each student layer's weights over the teacher's layers."""
    return bool(record) and all(side in ("encoder", "decoder") and isinstance(rows, list)
                                and all(isinstance(r, dict) and {"student_layer", "weights"} <= set(r) for r in rows)
                                for side, rows in record.items())


def heatmap_inputs(args, state) -> list:
    """What the heat map is made from: the checkpoint, the data and the teacher (given, or those
    the checkpoint names)."""
    task = state["cfg"]["task"]
    inputs = [("CHECKPOINT", args.checkpoint)]
    for option, given, stored, name in (("--data", args.data, task.get("data"), "the checkpoint's data"),
                                        ("--teacher-path", args.teacher_path, task.get("teacher_path"),
                                         "the checkpoint's teacher")):
        inputs += [(option if given else name, path) for path in str(given or stored or "").split(":") if path]
    return inputs


def main(argv=None):
    p = cli_parser(__doc__, full_doc=False)
    p.add_argument("checkpoint", help="training checkpoint of an alp_kd run")
    p.add_argument("--out", required=True, help="PNG path (the matrix goes to the same name .json)")
    p.add_argument("--data", help="data directory (default: the one stored in the checkpoint)")
    p.add_argument("--subset", default="valid")
    p.add_argument("--teacher-path", help="teacher (default: the one stored in the checkpoint)")
    args = p.parse_args(argv)

    def body():
        state = load_training_checkpoint(args.checkpoint, "alp_kd")
        record, replaced = check_heatmap_outputs(args.out, heatmap_inputs(args, state), "fsd-alp-heatmap",
                                                 is_alp_heatmap)
        matrices = average_alp_weights(args.checkpoint, args.data, args.subset, args.teacher_path, state=state)
        write_heatmap(args.out, record, matrices, plot)
        for side, rows in matrices.items():
            for r in rows:
                print(f"[alp] {side} student layer {r['student_layer']}: " +
                      " ".join(f"{w:.2f}" for w in r["weights"][1:]))
        print(f"[alp] wrote {args.out} and {record}" + (f"; replaced the earlier heat map {args.out}" if replaced else ""))

    run_cli("alp_heatmap", body)


if __name__ == "__main__":
    main()
