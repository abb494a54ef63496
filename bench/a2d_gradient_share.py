"""How hard A2D's attention term pulls, per form and batch shape (issue 48).

    .venv/bin/python bench/a2d_gradient_share.py [--papers-data DIR --papers-teacher PT] [--out DIR]

The *gradient share* of the attention term is ‖∇ β·L_attn‖ / ‖∇ ((1 − α)·CE + α·word-KD)‖
over the student's parameters (and over its encoder self-attention query and key weights
alone), at the student's initialisation, on one batch, dropout off, α = 0.5, β = 1. A form
whose share changes with the batch's shape is stronger or weaker depending on --max-tokens
and the corpus's sentence lengths, not on β alone.

Rows:
* the authors' setting, built synthetically: IWSLT-shaped batches (4096 tokens of sentences
  of about 27 tokens, about 150 a batch), a random ``transformer_iwslt_de_en`` teacher (6+6,
  d = 512, FFN 1024, 4 heads) and a 3+3 student of its width. ``FLAT_SCALE`` in
  ``fairseq_distill/terms/attention.py`` is the released form's share over the flat form's
  (at FLAT_SCALE 1) in this row, so that flat at β = 1 pulls as the released code does there;
* our papers' setting (``configs/papers.yaml``: 2+2, d = 128 student) on its real Multi30k
  batches, with its trained teacher when ``--papers-teacher`` is given;
* a sweep at d = 128 with synthetic batches: sentence length doubled at equal tokens per
  batch, and sentences per batch halved at equal length, to show what each form's share
  depends on.

Writes ``a2d_gradient_share.{json,md}`` (default ``bench/results/``). On 2 CPU cores it takes
a few minutes. ``--smoke`` runs tiny shapes (the test suite's form).
"""
import argparse
import json
import logging
import os
import sys
import tempfile
import time

logging.basicConfig(level=logging.WARNING)  # fairseq's INFO lines per model built would bury the tables

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
for _path in (REPO, BENCH):
    if _path not in sys.path:
        sys.path.insert(0, _path)

FORMS = {  # label -> a2d options (β = 1 for every form, to compare their scales)
    "reference": ["--a2d-kl-mode", "reference"],
    "flat": ["--a2d-kl-mode", "flat"],
    "rowwise": ["--a2d-kl-mode", "rowwise"],
}


def flat_scale() -> float:
    from fairseq_distill.terms.attention import FLAT_SCALE

    return FLAT_SCALE


def shares(crit, model, sample) -> dict:
    """The attention term's gradient share on ``sample``, over all student parameters and over
    the encoder self-attention q/k weights, as the criterion weighs its parts at the first epoch."""
    import torch

    from fairseq_distill.features import run_with_features

    model.eval()  # dropout off: the share of one batch, not of one dropout draw
    terms = dict(crit.terms)
    request = crit.feature_request(terms)
    student = run_with_features(model, sample["net_input"], request)
    student.log_probs = model.get_normalized_probs(student.net_output, log_probs=True)
    ce, _ = crit.label_smoothed_ce(model, student, sample)
    like = next(model.parameters())
    teachers = crit.teachers.features(sample["net_input"], request, like)
    values = crit.term_values(terms, student, teachers, sample)
    base = crit.ce_weight(terms) * ce + terms["word_kd"].current_weight() * values["word_kd"]
    attention = terms["a2d"].current_weight() * values["a2d"]
    params = [p for p in model.parameters() if p.requires_grad]
    qk = [p for n, p in model.named_parameters() if n.startswith("encoder.layers.")
          and (".self_attn.q_proj.weight" in n or ".self_attn.k_proj.weight" in n)]

    def norm(loss, over):
        grads = torch.autograd.grad(loss, over, retain_graph=True, allow_unused=True)
        return torch.sqrt(sum((g.float() ** 2).sum() for g in grads if g is not None)).item()

    return {"all": norm(attention, params) / norm(base, params), "encoder_qk": norm(attention, qk) / norm(base, qk),
            "sentences": int(sample["target"].size(0)), "tokens": int(sample["ntokens"]),
            "target_length": round(sample["ntokens"] / sample["target"].size(0), 1)}


def clamp_stats(crit, model, sample) -> dict:
    """The rowwise form's dead cells on ``sample``: the share of the aligned cells on allowed keys
    of real query rows that lie below the clamp (no gradient reaches them), and the share of the
    teacher's attention mass that sits on those cells, over all types and maps."""
    import torch

    from fairseq_distill.features import run_with_features

    term = crit.terms["a2d"]
    model.eval()
    request = crit.feature_request({"a2d": term})
    with torch.no_grad():
        student = run_with_features(model, sample["net_input"], request)
        teacher = crit.teachers.features(sample["net_input"], request, next(model.parameters()))[0]
        dead = cells = mass = total = 0.0
        for kind in term.types:
            key_mask, query_mask = term.masks(kind, sample)
            allowed = (key_mask & query_mask[:, None, :, None])  # B x 1 x T x S
            aligned = term.aams[kind](student.attention[kind])
            p = torch.cat([m.float() for m in teacher.attention[kind]], dim=1)
            below = (aligned < 1e-6) & allowed
            dead += below.sum().item()
            cells += allowed.expand_as(aligned).sum().item()
            mass += p.masked_fill(~below, 0).sum().item()
            total += p.masked_fill(~allowed, 0).sum().item()
    return {"dead_cells": dead / cells, "teacher_mass_on_dead_cells": mass / total}


def clamp_during_training(data, teacher, student_flags, updates: int) -> list:
    """:func:`clamp_stats` of the rowwise form at β = 0.01 (its weight before issue 48) on one
    batch, at initialisation and after training ``updates`` updates on the corpus."""
    from bench.gpu.training import middle_batch

    task, model, crit, trainer = build(data, teacher, student_flags, ["--a2d-kl-mode", "rowwise", "--a2d-weight",
                                                                      "0.01", "--a2d-decay-schedule", "epoch"],
                                       4096, with_trainer=True)
    sample = middle_batch(task, 4096)
    found = [{"updates": 0, **clamp_stats(crit, model, sample)}]
    itr = trainer.get_train_iterator(epoch=1).next_epoch_itr(shuffle=True)
    done = 0
    while done < updates:
        for batch in itr:
            trainer.train_step([batch])
            done += 1
            if done in (updates // 2, updates):
                found.append({"updates": done, **clamp_stats(crit, model, sample)})
            if done >= updates:
                break
        else:
            itr = trainer.get_train_iterator(epoch=trainer.get_num_updates() + 1).next_epoch_itr(shuffle=True)
    return found


def build(data: str, teacher: str, student_flags, form_flags, max_tokens: int, with_trainer: bool = False):
    from fairseq_distill.trainer_setup import build_training

    argv = [data, "--user-dir", os.path.join(REPO, "fairseq_distill"), "--source-lang", "de", "--target-lang", "en",
            "--optimizer", "adam", "--lr", "0.0005", "--label-smoothing", "0.1", "--max-tokens", str(max_tokens),
            "--seed", "1", "--num-workers", "0", "--cpu", "--max-epoch", "10",
            "--task", "translation_distill", "--teacher-path", teacher, "--criterion", "a2d",
            "--a2d-weight", "1.0", *form_flags, *student_flags]
    _, task, model, crit, trainer = build_training(argv)
    return (task, model, crit, trainer) if with_trainer else (task, model, crit)


def first_sentences(task, n: int):
    """A batch of the corpus's first ``n`` sentences (a fixed shape, whatever --max-tokens)."""
    task.load_dataset("train")
    dataset = task.dataset("train")
    return dataset.collater([dataset[i] for i in range(n)])


def measure(data, teacher, student_flags, max_tokens, sentences=None, forms=FORMS):
    """Each form's shares on one batch: the middle batch of ``max_tokens`` (a corpus's own
    shapes), or the first ``sentences`` sentences."""
    from bench.gpu.training import middle_batch

    rows = {}
    for name, flags in forms.items():
        task, model, crit = build(data, teacher, student_flags, flags, max_tokens)
        sample = first_sentences(task, sentences) if sentences else middle_batch(task, max_tokens)
        rows[name] = shares(crit, model, sample)
    return rows


def synthetic(work, label, vocab, sentences, mean_length, teacher_spec, sigma=0.5):
    """A synthetic corpus and a random teacher checkpoint for it."""
    from types import SimpleNamespace

    from bench.gpu.synthetic import write_synthetic_corpus
    from bench.gpu.training import save_random_teacher

    data = os.path.join(work, label)
    write_synthetic_corpus(data, vocab, sentences, mean_length, max_length=4 * int(mean_length) + 8, sigma=sigma)
    teacher = os.path.join(data, "teacher.pt")
    save_random_teacher(teacher_spec, data, SimpleNamespace(max_tokens=4096), False, teacher)
    return data, teacher


def model_flags(layers, dim, ffn, heads, dropout=0.1):
    return ["--arch", "transformer", "--encoder-layers", str(layers), "--decoder-layers", str(layers),
            "--encoder-embed-dim", str(dim), "--decoder-embed-dim", str(dim),
            "--encoder-ffn-embed-dim", str(ffn), "--decoder-ffn-embed-dim", str(ffn),
            "--encoder-attention-heads", str(heads), "--decoder-attention-heads", str(heads),
            "--dropout", str(dropout), "--share-all-embeddings"]


class Spec:
    """What bench.gpu.training.save_random_teacher needs of a model: its flags."""

    def __init__(self, flags):
        self._flags = flags

    def flags(self):
        return self._flags


def run(args) -> dict:
    smoke = args.smoke
    sweep = not args.authors_only
    out = {"flat_scale": flat_scale(), "beta": 1.0, "alpha": 0.5, "rows": []}
    with tempfile.TemporaryDirectory() as work:
        # the authors' setting: IWSLT-shaped batches, d = 512 (tiny shapes in the smoke run)
        # (4096 tokens a batch of sentences of about 27 tokens: 150 sentences)
        d, ffn, heads, layers_t, layers_s = (32, 64, 4, 2, 1) if smoke else (512, 1024, 4, 6, 3)
        length, sentences = (12, 32) if smoke else (27, 150)
        teacher_flags = model_flags(layers_t, d, ffn, heads, 0.3)
        data, teacher = synthetic(work, "authors", 1000 if smoke else 10000, sentences, length, Spec(teacher_flags),
                                  sigma=0.0)
        started = time.time()
        theirs = measure(data, teacher, model_flags(layers_s, d, ffn, heads, 0.3), 100000, sentences=sentences)
        out["rows"].append({"setting": f"authors' (synthetic IWSLT-shaped batch: {sentences} sentences of {length} "
                                       f"tokens; {layers_s}+{layers_s} student, {layers_t}+{layers_t} random teacher, "
                                       f"d = {d})", "forms": theirs, "seconds": round(time.time() - started, 1)})
        out["calibration"] = {"released_over_flat": theirs["reference"]["all"] / theirs["flat"]["all"] * out["flat_scale"]}
        # ours: the papers recipe's data and teacher
        if args.papers_data and args.papers_teacher:
            started = time.time()
            ours = measure(args.papers_data, args.papers_teacher, model_flags(2, 128, 512, 4, 0.2), 4096)
            out["rows"].append({"setting": "papers recipe (Multi30k batches, 2+2 student, its trained 6+6 teacher, "
                                           "d = 128)", "forms": ours, "seconds": round(time.time() - started, 1)})
            if args.clamp_updates:
                started = time.time()
                out["clamp"] = {"setting": "papers recipe, rowwise form at β = 0.01 (renorm, clamp 1e-6), one "
                                           "Multi30k batch", "points": clamp_during_training(
                                               args.papers_data, args.papers_teacher, model_flags(2, 128, 512, 4, 0.2),
                                               args.clamp_updates), "seconds": round(time.time() - started, 1)}
        if not sweep:
            return out
        # the sweep: one batch shape at a time, sentences of one length (targets 0.8-1.25 times it)
        d, ffn = (32, 64) if smoke else (128, 512)
        teacher_flags = model_flags(2 if smoke else 6, d, ffn, 4, 0.2)
        student_flags = model_flags(1 if smoke else 2, d, ffn, 4, 0.2)
        shapes = ((8, 16), (16, 16), (8, 32)) if smoke else ((12, 64), (24, 64), (48, 64), (12, 128), (12, 256))
        for length in sorted({l for l, _ in shapes}):
            data, teacher = synthetic(work, f"sweep{length}", 1000 if smoke else 8000, max(n for _, n in shapes),
                                      length, Spec(teacher_flags), sigma=0.0)
            for _, n in [shape for shape in shapes if shape[0] == length]:
                started = time.time()
                rows = measure(data, teacher, student_flags, 100000, sentences=n)
                out["rows"].append({"setting": f"sweep: random {2 if smoke else 6}+{2 if smoke else 6} teacher, "
                                               f"{1 if smoke else 2}+{1 if smoke else 2} student, d = {d}, "
                                               f"{n} source sentences of {length} tokens",
                                    "sweep": {"length": length, "sentences": n}, "forms": rows,
                                    "seconds": round(time.time() - started, 1)})
    return out


def render(result: dict) -> str:
    lines = ["# A2D: the attention term's gradient share, per form and batch shape", "",
             "`bench/a2d_gradient_share.py` (issue 48). Share = ‖∇ β·L_attn‖ / ‖∇ (0.5·CE + 0.5·word-KD)‖ at the "
             "student's initialisation, one batch, dropout off, β = 1 for every form; over all student "
             "parameters and over the encoder self-attention q/k weights. `flat` at FLAT_SCALE = "
             f"{result['flat_scale']}.", ""]
    for row in result["rows"]:
        lines += [f"## {row['setting']}", "",
                  "| form | sentences | target tokens per sentence | share, all parameters | share, encoder q/k |",
                  "|---|---|---|---|---|"]
        for name, r in row["forms"].items():
            lines.append(f"| {name} | {r['sentences']} | {r['target_length']} | {r['all']:.3g} | {r['encoder_qk']:.3g} |")
        lines += ["", f"({row['seconds']} s)", ""]
    clamp = result.get("clamp")
    if clamp:
        lines += [f"## The clamp: {clamp['setting']}", "",
                  "| updates trained | aligned cells below the clamp (no gradient) | teacher mass on them |",
                  "|---|---|---|"]
        lines += [f"| {p['updates']} | {p['dead_cells']:.1%} | {p['teacher_mass_on_dead_cells']:.1%} |"
                  for p in clamp["points"]]
        lines += ["", f"({clamp['seconds']} s)", ""]
    cal = result.get("calibration")
    if cal:
        lines += [f"The released form's share over the flat form's at FLAT_SCALE = 1 in the authors' setting: "
                  f"{cal['released_over_flat']:.3g} (FLAT_SCALE is {result['flat_scale']}).", ""]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    p.add_argument("--out", default=os.path.join(BENCH, "results"))
    p.add_argument("--papers-data", help="the papers recipe's binarized data (work/papers/data/multi30k-*)")
    p.add_argument("--papers-teacher", help="the papers recipe's teacher checkpoint (work/papers/runs/teacher-*/model.pt)")
    p.add_argument("--smoke", action="store_true", help="tiny shapes, a few seconds (the tests)")
    p.add_argument("--clamp-updates", type=int, default=0,
                   help="with the papers recipe's data and teacher: the rowwise form's dead cells at "
                        "initialisation and after this many updates")
    p.add_argument("--authors-only", action="store_true", help="the authors' setting alone (FLAT_SCALE's calibration)")
    args = p.parse_args(argv)
    result = run(args)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "a2d_gradient_share.json"), "w") as f:
        json.dump(result, f, indent=1)
    text = render(result)
    with open(os.path.join(args.out, "a2d_gradient_share.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
