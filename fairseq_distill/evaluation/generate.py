"""Run stock ``fairseq-generate`` in a subprocess and collect its output by sentence id.

Shared by evaluation and sequence-level KD data generation. The raw generate output is
kept in a log file; the terminal shows a progress bar (sentences done / total) instead.
With ``--nbest N`` fairseq-generate prints N hypotheses per sentence, best first: all are
kept in :attr:`GenerationResult.nbest`, the first in :attr:`GenerationResult.hypotheses`.
Given ``on_sentence``, nothing is kept: each sentence's hypotheses are handed to it as soon as
they are complete (fairseq prints a sentence's lines together), so a corpus of millions of
sentences is decoded in flat memory (seq-KD shards, :mod:`fairseq_distill.seqkd.decode`).
"""
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import torch
from tqdm import tqdm

from fairseq_distill.errors import DistillError

# the plugin's root, for --user-dir (this module sits in its evaluation/ sub-package)
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATION_DONE = "NOTE: hypothesis and token scores are output in base 2"  # logged after the last sentence
SPEED_LINE = re.compile(
    r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s "
    r"\(([\d.]+) sentences/s, ([\d.]+) tokens/s\)"
)


@dataclass
class GenerationResult:
    hypotheses: Dict[int, str] = field(default_factory=dict)  # first H-line (model tokens, or post-processed)
    nbest: Dict[int, List[str]] = field(default_factory=dict)  # every H-line, in fairseq's order (best first)
    detokenized: Dict[int, str] = field(default_factory=dict)  # D-lines
    references: Dict[int, str] = field(default_factory=dict)  # T-lines
    sentences: int = 0
    tokens: int = 0
    generation_seconds: float = 0.0
    sentences_per_second: float = 0.0
    tokens_per_second: float = 0.0
    wall_seconds: float = 0.0


def device_args() -> List[str]:
    return [] if torch.cuda.is_available() else ["--cpu"]


def progress_bar(total: Optional[int], description: str) -> tqdm:
    """Sentences done / total and sentences per second on standard error, at most every 2 s."""
    return tqdm(total=total, desc=description, unit="sent", file=sys.stderr, mininterval=2.0,
                disable=None if sys.stderr.isatty() else False)


def run_generate(
    data: str,
    checkpoints: str,
    subset: str,
    args: List[str],
    total: Optional[int] = None,
    log_path: Optional[str] = None,
    description: str = "generate",
    env: Optional[Dict[str, str]] = None,
    on_sentence: Optional[Callable[[int, List[str]], None]] = None,
) -> GenerationResult:
    """``fairseq-generate DATA --path CHECKPOINTS --gen-subset SUBSET ARGS`` with our plugin loaded;
    ``env``: variables set for it on top of ours (e.g. ``OMP_NUM_THREADS``, its torch threads).
    ``on_sentence(id, hypotheses)``: called once per sentence with its H-lines (best first) when
    they are complete, in fairseq's output order; the result then holds the counts only."""
    cmd = [
        sys.executable, "-m", "fairseq_cli.generate", data,
        "--path", checkpoints, "--gen-subset", subset,
        "--user-dir", PACKAGE_DIR, "--log-format", "simple",
        # with the default multiple of 8, fairseq-generate silently drops sentences
        # (fairseq issue #5351); every sentence must come back
        "--required-batch-size-multiple", "1",
        *device_args(), *args,
    ]
    result = GenerationResult()
    started = time.time()
    log = open(log_path, "w", encoding="utf-8") if log_path else None
    bar = progress_bar(total, description)
    proc = None
    try:
        if log:
            log.write(" ".join(cmd) + "\n")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, encoding="utf-8", errors="replace",
                                env={**os.environ, **env} if env else None)
        tail, finished = [], False
        current, hyps = None, []  # with on_sentence: the sentence whose H-lines are being read
        for line in proc.stdout:
            if log:
                log.write(line)
            line = line.rstrip("\n")
            kind, _, rest = line.partition("-")
            if kind in ("H", "D", "T") and "\t" in rest:
                sid, _, payload = rest.partition("\t")
                if not sid.isdigit():
                    continue
                if on_sentence is not None:  # hypotheses only, handed on: nothing kept
                    if kind == "H":
                        sid = int(sid)
                        if sid != current:
                            if current is not None:
                                on_sentence(current, hyps)
                            current, hyps = sid, []
                            bar.update(1)
                        hyps.append(payload.partition("\t")[2])
                elif kind == "T":
                    result.references[int(sid)] = payload
                else:
                    _score, _, text = payload.partition("\t")
                    sid = int(sid)
                    if kind == "H":
                        result.nbest.setdefault(sid, []).append(text)
                        if sid not in result.hypotheses:
                            result.hypotheses[sid] = text
                            bar.update(1)
                    elif sid not in result.detokenized:
                        result.detokenized[sid] = text
                continue
            finished = finished or GENERATION_DONE in line
            speed = SPEED_LINE.search(line)
            if speed:
                result.sentences = int(speed.group(1).replace(",", ""))
                result.tokens = int(speed.group(2).replace(",", ""))
                result.generation_seconds = float(speed.group(3))
                result.sentences_per_second = float(speed.group(4))
                result.tokens_per_second = float(speed.group(5))
            tail = (tail + [line])[-30:]
        code = proc.wait()
        if code != 0 and finished and current is None and not result.hypotheses \
                and any("ZeroDivisionError" in t for t in tail):
            # a shard given no batch (fewer batches than shards): fairseq-generate has written
            # everything (nothing) and then divides by its generation time, 0, in its summary line
            code, result.sentences = 0, 0
        if current is not None and code == 0:
            on_sentence(current, hyps)
    except BaseException:
        if proc is not None and proc.poll() is None:  # e.g. on_sentence failed: fairseq-generate stops too
            proc.kill()
            proc.wait()
        raise
    finally:
        bar.close()
        if log:
            log.close()
    if code != 0:  # a bad checkpoint, data or option: said in one message, no traceback of ours
        raise DistillError(
            f"fairseq-generate failed (exit {code}); its last lines:\n" + "\n".join(tail)
            + (f"\nfull log: {log_path}" if log_path else "")
        )
    result.wall_seconds = time.time() - started
    return result
