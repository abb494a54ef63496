"""Cache-fill speed of the Hugging Face teacher of ``configs/hf_teacher.yaml`` against a fairseq
teacher of the same shape, on the same data and machine, one after the other.

The fairseq teacher is a Transformer of the MarianMT teacher's shape (6+6 layers, d = 128,
FFN 512, 4 heads, GELU, post-norm, embeddings shared and tied) over the same data-bin, so its
output layer has the same width: what differs is the teacher's code, not its size. Its weights
are one update from random (speed does not depend on them). Each teacher fills the top-8 cache
of the recipe's seq-KD data with ``fsd-cache-teacher --cpu``; the time is the cache's own
``build_seconds`` (the teacher's forward passes and writing the rows, without start-up).

    python bench/hf_cache_speed.py [--workdir work/hf_teacher]
needs ``bench/run.py configs/hf_teacher.yaml`` to have made the seq-KD data; writes
bench/results/hf_cache_speed.{json,md}.
"""
import argparse
import json
import os
import subprocess
import sys

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench.runner.execute import finished_recipe  # noqa: E402
from bench.runner.host import cpu_model  # noqa: E402

BIN = os.path.dirname(sys.executable)
SAME_SHAPE = ["--arch", "transformer", "--encoder-layers", "6", "--decoder-layers", "6",
              "--encoder-embed-dim", "128", "--decoder-embed-dim", "128", "--encoder-ffn-embed-dim", "512",
              "--decoder-ffn-embed-dim", "512", "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
              "--activation-fn", "gelu", "--share-all-embeddings"]


def run(argv, log):
    with open(log, "w") as f:
        proc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, text=True)
    if proc.returncode:
        sys.exit(f"hf_cache_speed: {' '.join(argv[:2])} failed; its output: {log}")


def fairseq_teacher(data, out):
    """A fairseq teacher of the MarianMT teacher's shape: one update from random weights."""
    checkpoint = os.path.join(out, "checkpoint_last.pt")
    if not os.path.isfile(checkpoint):
        run([os.path.join(BIN, "fairseq-train"), data, *SAME_SHAPE, "--optimizer", "adam", "--lr", "1e-4",
             "--max-tokens", "4096", "--max-update", "1", "--criterion", "cross_entropy", "--disable-validation",
             "--no-epoch-checkpoints", "--save-dir", out, "--cpu", "--seed", "1"], out + ".log")
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    # the shared embeddings stand in the state three times (encoder, decoder, output): count each tensor once
    unique = {v.data_ptr(): v.numel() for k, v in state["model"].items() if not k.endswith("_float_tensor")}
    return checkpoint, sum(unique.values())


def fill(teacher, data, out):
    if os.path.isdir(out):
        import shutil

        shutil.rmtree(out)
    run([os.path.join(BIN, "fsd-cache-teacher"), "--teacher", teacher, "--data", data, "--top-k", "8",
         "--out", out, "--cpu"], out + ".log")
    with open(os.path.join(out, "meta.json")) as f:
        meta = json.load(f)
    return {"tokens": meta["tokens"], "build_seconds": meta["build_seconds"],
            "tokens_per_second": round(meta["tokens"] / meta["build_seconds"], 1)}


def main():
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    p.add_argument("--workdir", default=None)
    p.add_argument("--results", default=os.path.join(REPO, "bench", "results"))
    args = p.parse_args()
    recipe = finished_recipe(os.path.join(REPO, "configs", "hf_teacher.yaml"), args.workdir)
    if "seqkd-hf" not in recipe.done:
        sys.exit("hf_cache_speed: the recipe's seq-KD data (seqkd-hf) has not been made; run "
                 "bench/run.py configs/hf_teacher.yaml first")
    data = recipe.plan.output_of("seqkd-hf", "data_bin")
    hf_dir = recipe.plan.output_of("hf-teacher", "checkpoint")
    work = os.path.join(recipe.workdir, "hf-cache-speed")
    os.makedirs(work, exist_ok=True)
    checkpoint, fairseq_parameters = fairseq_teacher(data, os.path.join(work, "fairseq-same-shape"))
    pretrained = next(r for r in recipe.done.values() if r["kind"] == "pretrained")
    rows = []
    for kind, teacher, parameters in (("Hugging Face (MarianMT)", hf_dir, pretrained["parameters"]),
                                      ("fairseq, the same shape", checkpoint, fairseq_parameters)):
        result = fill(teacher, data, os.path.join(work, "cache-" + ("hf" if "Hugging" in kind else "fairseq")))
        rows.append({"teacher": kind, "parameters": parameters, **result})
        print(f"[hf_cache_speed] {kind}: {result['tokens']:,} tokens in {result['build_seconds']} s "
              f"({result['tokens_per_second']:,.0f} tokens/s)", flush=True)
    ratio = round(rows[1]["tokens_per_second"] / rows[0]["tokens_per_second"], 2)
    meta = {"data": "seqkd-hf of configs/hf_teacher.yaml", "top_k": 8, "cpu": cpu_model(),
            "threads": torch.get_num_threads(), "rows": rows, "fairseq_over_hf": ratio}
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, "hf_cache_speed.json"), "w") as f:
        json.dump(meta, f, indent=2)
    table = ["| teacher | parameters | target tokens | cache fill | tokens/s |", "|---|---|---|---|---|"]
    table += [f"| {r['teacher']} | {r['parameters'] / 1e6:.2f}M | {r['tokens']:,} | {r['build_seconds']} s | "
              f"{r['tokens_per_second']:,.0f} |" for r in rows]
    with open(os.path.join(args.results, "hf_cache_speed.md"), "w") as f:
        f.write(f"# hf_cache_speed: the cache fill of a Hugging Face teacher and of a fairseq teacher of its shape\n\n"
                f"`fsd-cache-teacher --top-k 8 --cpu` over the seq-KD data of `configs/hf_teacher.yaml`, one after "
                f"the other on one machine ({meta['cpu']}, {meta['threads']} threads); the time is the cache's "
                f"`build_seconds`. The fairseq teacher fills {ratio} times as many tokens a second.\n\n"
                + "\n".join(table) + "\n")
    print("\n".join(table))


if __name__ == "__main__":
    main()
