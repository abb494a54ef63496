"""Where CTranslate2's CPU decoding time goes at the papers' width: one random-weight 6+6, d=512
teacher (``bench/gpu_bench.py``'s), exported once, decoding the same synthetic sources under
each thread split and batch size, for issue 36's profile.

    .venv/bin/python bench/ctranslate2_threads.py [--out bench/results] [--sentences 256]

Rows: compute type (float32, int8) × (inter_threads, intra_threads) over the machine's cores ×
batch size in sentences, or in tokens (``max_batch_size`` with ``batch_type="tokens"``); beam 4;
the sources handed over 256 at a time, length-sorted, with one length limit per call (1.2 · its
longest source + 10); fastest of two rounds, the configurations taking turns. Writes ``ctranslate2_threads.{json,md}``. Run it on an idle machine.
"""
import argparse
import json
import os
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(BENCH))

from bench.gpu.plan import plan  # noqa: E402
from bench.gpu.synthetic import write_synthetic_corpus  # noqa: E402
from bench.gpu.training import save_random_teacher  # noqa: E402


def configurations(cores: int):
    splits = sorted({(1, cores), (cores, 1)} | ({(2, cores // 2)} if cores >= 4 else set()))
    for compute_type in ("float32", "int8"):
        for inter, intra in splits:
            for batch, batch_type in ((32, "examples"), (64, "examples"), (1024, "tokens")):
                yield {"compute_type": compute_type, "inter_threads": inter, "intra_threads": intra,
                       "batch": batch, "batch_type": batch_type}


def decode(translator, batches, batch, batch_type, beam):
    """Tokens generated and seconds for every batch (the decoding benchmark's length limit)."""
    started, tokens = time.perf_counter(), 0
    for chunk in batches:
        limits = max(int(1.2 * len(s) + 10) for s in chunk)
        results = translator.translate_batch(chunk, beam_size=beam, max_decoding_length=limits,
                                             max_batch_size=batch, batch_type=batch_type)
        tokens += sum(len(r.hypotheses[0]) for r in results)
    return tokens, time.perf_counter() - started


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    p.add_argument("--out", default=os.path.join(BENCH, "results"))
    p.add_argument("--sentences", type=int, default=256)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--smoke", action="store_true", help="a tiny teacher, for the tests")
    args = p.parse_args(argv)
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import ctranslate2

    from fairseq_distill.deploy.ctranslate2_export import export_ctranslate2

    teachers, _, _, budget, _ = plan("cpu-decoding-smoke" if args.smoke else "cpu-decoding")
    spec, cores = teachers[0], os.cpu_count() or 1
    rows = list(configurations(cores))
    with tempfile.TemporaryDirectory(prefix="ct2-threads-") as work:
        data = os.path.join(work, "data")
        sources = write_synthetic_corpus(data, budget.vocab, budget.train_sentences, budget.mean_length,
                                         budget.max_length)[:args.sentences]
        checkpoint = os.path.join(work, "teacher", "checkpoint.pt")
        save_random_teacher(spec, data, budget, False, checkpoint)
        export = os.path.join(work, "ct2")
        export_ctranslate2(checkpoint, data, export, "float32", force=True)
        # length-sorted, as fsd-seqkd's CTranslate2 backend hands sentences over
        ordered = sorted(sources, key=len)
        batches = [ordered[i:i + 256] for i in range(0, len(ordered), 256)]
        translators = [ctranslate2.Translator(export, device="cpu", compute_type=r["compute_type"],
                                              inter_threads=r["inter_threads"], intra_threads=r["intra_threads"])
                       for r in rows]
        for row, translator in zip(rows, translators):  # warm-up: first-call costs are not speed
            translator.translate_batch([ordered[0]], beam_size=budget.beam, max_decoding_length=20)
        for round_ in range(args.rounds):
            for row, translator in zip(rows, translators):
                tokens, seconds = decode(translator, batches, row["batch"], row["batch_type"], budget.beam)
                row.setdefault("rounds", []).append(round(tokens / seconds, 1))
                row["generated_tokens"] = tokens
                print(f"[ct2-threads] {row['compute_type']} inter {row['inter_threads']} intra "
                      f"{row['intra_threads']} batch {row['batch']} {row['batch_type']}: "
                      f"{tokens / seconds:,.0f} tokens/s (round {round_ + 1})", flush=True)
    for row in rows:
        row["tokens_per_second"] = max(row["rounds"])
    result = {"teacher": spec.shape(), "cores": cores, "sentences": len(sources), "beam": budget.beam,
              "ctranslate2": ctranslate2.__version__, "rows": rows}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ctranslate2_threads.json"), "w") as f:
        json.dump(result, f, indent=2)
    lines = ["# CTranslate2 on the CPU: threads and batches (`bench/ctranslate2_threads.py`)", "",
             f"A random-weight {spec.shape()} teacher exported once (CTranslate2 {ctranslate2.__version__}), "
             f"{len(sources)} synthetic sources sorted by length and handed over 256 at a time, beam {budget.beam}, "
             f"one length limit per call (1.2 · its longest source + 10), "
             f"{cores} cores; fastest of {args.rounds} rounds, the configurations taking turns.", "",
             "| compute type | inter_threads | intra_threads | batch | tokens/s | generated tokens |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['compute_type']} | {r['inter_threads']} | {r['intra_threads']} | {r['batch']} "
                     f"{r['batch_type']} | {r['tokens_per_second']:,.0f} | {r['generated_tokens']:,} |")
    with open(os.path.join(args.out, "ctranslate2_threads.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"[ct2-threads] wrote {os.path.join(args.out, 'ctranslate2_threads.md')}")


if __name__ == "__main__":
    main()
