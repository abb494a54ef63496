"""Seq-KD decoding rows: each model translates the same batches of the synthetic training
source with fairseq's generator (float32, and float16 on a GPU) and with CTranslate2 (each
compute type), the backends taking turns; tokens/s of the fastest round."""
import os
from typing import List

from bench.gpu.plan import Budget
from bench.gpu.progress import free_memory, guarded


class _Tokens:
    """The segmenter ``translate_lines`` wants, for text that is already model tokens."""

    @staticmethod
    def encode(line: str) -> List[str]:
        return line.split()

    @staticmethod
    def decode(pieces: List[str]) -> str:
        return " ".join(pieces)


def ctranslate2_translator(model_dir: str, options, compute_type: str, device: str):
    """CTranslate2Translator loading the exported model with ``compute_type`` (float16,
    int8_float16, ...): the export (float32) is converted when loaded."""
    import ctranslate2
    import torch

    from fairseq_distill.deploy.translators import CTranslate2Translator, read_deployment

    translator = CTranslate2Translator.__new__(CTranslate2Translator)
    info = read_deployment(model_dir)
    translator.options = options
    translator.translator = ctranslate2.Translator(model_dir, device=device, compute_type=compute_type,
                                                   intra_threads=torch.get_num_threads())
    translator.max_source_tokens = info["max_source_positions"] - 1
    translator.quantization = compute_type
    return translator


def fairseq_translator(checkpoint: str, data: str, options, precision: str):
    from fairseq_distill.deploy.translators import FairseqTranslator

    translator = FairseqTranslator(checkpoint, data, options)
    if precision == "float16":
        for model in translator.models:
            model.half()  # in place: the generator holds these modules
    return translator


def measure_decoding(result: dict, decoders, budget: Budget, compute_types, sources, data: str, work: str,
                     paths: dict, cuda: bool, progress, checkpoint):
    """Every (model, backend) row into ``result["decoding"]``; ``checkpoint()`` after each model."""
    from fairseq_distill.deploy.ctranslate2_export import export_ctranslate2
    from fairseq_distill.deploy.translators import DecodingOptions, translate_lines

    options = DecodingOptions(beam=budget.beam)
    lines = [" ".join(s) for s in sources[:budget.decode_sentences]]
    device = "cuda" if cuda else "cpu"
    fairseq_precisions = ["float32", "float16"] if cuda else ["float32"]
    for spec in decoders:
        backends = []  # (row, translator)
        for precision in fairseq_precisions:
            row = {"teacher": spec.name, "teacher_shape": spec.shape(), "backend": f"fairseq {precision}",
                   "precision": precision, "device": result["device"]}
            if spec.name not in paths:
                row["error"] = f"no {spec.name} checkpoint (see its row)"
            else:
                holder = {}
                guarded(row, progress, f"load {spec.name} in fairseq {precision}",
                        lambda: holder.update(t=fairseq_translator(paths[spec.name], data, options, precision)) or {})
                if "t" in holder:
                    backends.append((row, holder["t"]))
            result["decoding"].append(row)
        export = os.path.join(work, spec.name, "ctranslate2")
        export_row = {"teacher": spec.name}
        if spec.name in paths:
            guarded(export_row, progress, f"CTranslate2 export of {spec.name}",
                    lambda: {"export_mib": round(export_ctranslate2(paths[spec.name], data, export, "float32",
                                                                    force=True)["model_bytes"] / 2**20, 1)})
        for compute_type in compute_types:
            row = {"teacher": spec.name, "teacher_shape": spec.shape(), "backend": f"ctranslate2 {compute_type}",
                   "precision": compute_type, "device": result["device"]}
            if spec.name not in paths or export_row.get("error"):
                row["error"] = export_row.get("error") or f"no {spec.name} checkpoint (see its row)"
            else:
                holder = {}
                guarded(row, progress, f"load {spec.name} in CTranslate2 {compute_type}",
                        lambda: holder.update(t=ctranslate2_translator(export, options, compute_type, device)) or {})
                if "t" in holder:
                    backends.append((row, holder["t"]))
            result["decoding"].append(row)
        rounds = {id(row): [] for row, _ in backends}
        for row, translator in backends:
            try:
                translator.translate([lines[0].split()])  # warm-up: first-call costs are not speed
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {e}"[:500]
        for round_ in range(budget.repeats):
            for row, translator in backends:
                if row.get("error"):
                    continue
                try:
                    run = translate_lines(lines, translator, _Tokens(), budget.decode_batch, progress=False)
                    rounds[id(row)].append(run)
                    progress(f"decode {spec.name} {row['backend']} round {round_ + 1}: "
                             f"{run.tokens_per_second:,.0f} tokens/s")
                except Exception as e:
                    row["error"] = f"{type(e).__name__}: {e}"[:500]
                    progress(f"decode {spec.name} {row['backend']}: FAILED {row['error']}")
        for row, _ in backends:
            if row.get("error") or not rounds[id(row)]:
                continue
            best = max(rounds[id(row)], key=lambda r: r.tokens_per_second)
            row.update({"tokens_per_second": round(best.tokens_per_second, 1), "sentences": best.sentences,
                        "generated_tokens": best.generated_tokens, "seconds": round(best.seconds, 3),
                        "tokens_per_second_rounds": [round(r.tokens_per_second, 1) for r in rounds[id(row)]],
                        "beam": budget.beam, "batch_size": budget.decode_batch})
        if export_row.get("error"):
            result["decoding"].append({"teacher": spec.name, "backend": "ctranslate2 export",
                                       "error": export_row["error"]})
        del backends
        free_memory()
        checkpoint()
