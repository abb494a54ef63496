"""Export a student to CTranslate2 (optionally int8-quantised) for deployment.

The result is a directory that translates raw text on its own: the converted model, the
subword model and metadata of the data it was trained on, and ``fairseq_distill_deploy.json``
(languages, quantisation, source checkpoint, input limit).

CTranslate2's fairseq converter reads a checkpoint whose model options are a legacy
``argparse`` namespace that also names the task and data; students exported by this plugin
store plain dicts, so the converter gets a temporary checkpoint in that form, written here.
"""
import argparse
import json
import os
import shutil
import tempfile
from typing import Optional

import torch
from omegaconf import OmegaConf

from fairseq_distill.deploy.checkpoint import load_checkpoint, plain_model_config
from fairseq_distill.errors import DistillError
from fairseq_distill.text.segmentation import META_FILE, find_subword_model, load_meta
from fairseq_distill.deploy.translators import DEPLOY_FILE

QUANTIZATIONS = ("int8", "int8_float32", "int16", "float32")

# what our own architectures add that CTranslate2's Transformer cannot express
UNSUPPORTED = {
    "deep_transformer": "relative position representations in self-attention (architecture "
                        "deep_transformer); CTranslate2's fairseq converter supports absolute "
                        "positions only",
}


def converter_args(model_cfg: dict, data_bin: str, source_lang: str, target_lang: str) -> argparse.Namespace:
    args = argparse.Namespace(**{k: v for k, v in model_cfg.items() if not k.startswith("_")})
    args.arch = model_cfg.get("arch") or model_cfg.get("_name")
    args.task, args.data = "translation", data_bin
    args.source_lang, args.target_lang = source_lang, target_lang
    return args


def model_config(state: dict):
    """(plain model config, architecture name) of a loaded checkpoint."""
    cfg = state["cfg"]["model"]
    model_cfg = plain_model_config(cfg if isinstance(cfg, argparse.Namespace)
                                   else OmegaConf.to_container(cfg, resolve=True))
    return model_cfg, model_cfg.get("arch") or model_cfg.get("_name")


def read_model(checkpoint: str):
    """(state, plain model config, architecture name) of a checkpoint."""
    state = load_checkpoint(checkpoint)
    return (state, *model_config(state))


def unsupported_reason(arch: str):
    """Why CTranslate2 cannot express architecture ``arch``; None if it can (as far as we know:
    the converter has checks of its own, see :func:`convert`)."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    return UNSUPPORTED.get(ARCH_MODEL_NAME_REGISTRY.get(arch))


def convert(checkpoint: str, state: dict, model_cfg: dict, data_bin: str, source_lang: str,
            target_lang: str, out_dir: str, quantization: str = "float32"):
    """Run CTranslate2's fairseq converter on a loaded checkpoint; the vocabularies are the
    dictionaries of ``data_bin``. Raises DistillError when the converter refuses the model."""
    try:
        from ctranslate2.converters import FairseqConverter
    except ImportError as e:
        raise DistillError("CTranslate2 conversion needs the package: pip install ctranslate2") from e
    with tempfile.TemporaryDirectory() as tmp:
        legacy = os.path.join(tmp, "checkpoint.pt")
        torch.save({"args": converter_args(model_cfg, data_bin, source_lang, target_lang),
                    "model": state["model"]}, legacy)
        converter = FairseqConverter(legacy, data_bin, source_lang=source_lang, target_lang=target_lang)
        try:
            converter.convert(out_dir, quantization=None if quantization == "float32" else quantization,
                              force=True)
        except (ValueError, NotImplementedError) as e:  # the converter's own "not supported" checks
            raise DistillError(f"CTranslate2 cannot convert {checkpoint}: {e}") from e


def check_out_dir(out_dir: str, force: bool):
    """An output directory may be new, empty, or (with ``force``) an earlier export of this tool:
    the converter empties the folder it writes, so anything else in it would be lost."""
    if not os.path.exists(out_dir):
        return
    if not os.path.isdir(out_dir):
        raise DistillError(f"output '{out_dir}' exists and is not a directory; give a new directory")
    names = sorted(os.listdir(out_dir))
    if not names:
        return
    if not os.path.isfile(os.path.join(out_dir, DEPLOY_FILE)):
        listed = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise DistillError(f"output directory '{out_dir}' holds files that are not an earlier CTranslate2 export "
                           f"({listed}; no {DEPLOY_FILE}): they would be lost, so it is not replaced, even with "
                           f"--force; give a new directory")
    if not force:
        raise DistillError(f"output directory '{out_dir}' holds an earlier CTranslate2 export; pass --force to "
                           f"replace it, or give a new directory")


def replace_dir(new: str, out_dir: str):
    """Move the finished export ``new`` to ``out_dir``, replacing an earlier one whole: the old is
    moved aside first and removed only once the new one is in place."""
    old = None
    if os.path.isdir(out_dir):
        if os.listdir(out_dir):
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.old-", dir=os.path.dirname(new))
            os.rmdir(old)
            os.rename(out_dir, old)
        else:
            os.rmdir(out_dir)
    os.rename(new, out_dir)
    if old:
        shutil.rmtree(old)


def deployment_meta(state: dict, data_bin: str, subword_model: Optional[str] = None):
    """What translating raw text needs beside the model: (the metadata written into the export,
    {file name in the export: the file to copy there}). From ``fairseq_distill.json`` where
    fsd-prepare-corpus wrote one; for a stock fairseq data-bin, the languages the checkpoint
    names and the subword model given (``--subword-model``: a sentencepiece ``.model``, else
    subword-nmt codes) or the one the data-bin holds."""
    from fairseq_distill.data_bin import model_languages

    meta = load_meta(data_bin)
    if meta is not None and not subword_model:
        kept = {k: v for k, v in meta.items() if k in ("source_lang", "target_lang", "bpe",
                                                       "sentencepiece_model", "bpe_codes")}
        return kept, {meta[k]: os.path.join(data_bin, meta[k]) for k in ("sentencepiece_model", "bpe_codes")
                      if meta.get(k)}
    src, tgt = model_languages(state, data_bin, meta)
    _, subword_model = find_subword_model(data_bin, subword_model,
                                          f"{data_bin} has no {META_FILE} (a stock fairseq data-bin) and holds")
    name = os.path.basename(subword_model)
    if name.endswith(".model"):
        return ({"source_lang": src, "target_lang": tgt, "bpe": "sentencepiece", "sentencepiece_model": name},
                {name: subword_model})
    return ({"source_lang": src, "target_lang": tgt, "bpe": "subword_nmt", "bpe_codes": name},
            {name: subword_model})


def export_ctranslate2(checkpoint: str, data_bin: str, out_dir: str, quantization: str = "int8",
                       force: bool = False, subword_model: Optional[str] = None) -> dict:
    """Export ``checkpoint`` with the dictionaries and subword model of ``data_bin`` (the data it
    was trained on, checked by content) to ``out_dir``. The export is written beside ``out_dir``
    and moved into place when complete. ``subword_model``: for a data-bin not made by
    fsd-prepare-corpus, the subword model its text was segmented with."""
    from fairseq_distill.data_bin import check_model_dictionaries
    from fairseq_distill.workdir import check_outputs

    try:
        import ctranslate2  # noqa: F401
    except ImportError as e:
        raise DistillError("CTranslate2 export needs the package: pip install ctranslate2") from e
    if quantization not in QUANTIZATIONS:
        raise DistillError(f"unknown quantization '{quantization}'; choose one of {', '.join(QUANTIZATIONS)}")
    check_outputs([("OUT_DIR", out_dir)], [("CHECKPOINT", checkpoint), ("DATA_BIN", data_bin),
                                           ("--subword-model", subword_model)])
    check_out_dir(out_dir, force)

    state, model_cfg, arch = read_model(checkpoint)
    reason = unsupported_reason(arch)
    if reason:
        raise DistillError(f"{checkpoint} cannot be exported to CTranslate2: {reason}")
    meta, files = deployment_meta(state, data_bin, subword_model)
    src, tgt = meta["source_lang"], meta["target_lang"]
    check_model_dictionaries(state, checkpoint, data_bin, src, tgt)
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    new = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(out_dir))}.partial-", dir=parent)
    try:
        convert(checkpoint, state, model_cfg, data_bin, src, tgt, new, quantization)
        # what translating raw text needs: the subword model and the data's metadata
        for name, path in files.items():
            shutil.copy(path, os.path.join(new, name))
        with open(os.path.join(new, META_FILE), "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=2)
        info = {
            "source_checkpoint": os.path.abspath(checkpoint),
            "arch": arch,
            "quantization": quantization,
            "source_lang": src,
            "target_lang": tgt,
            "max_source_positions": int(model_cfg.get("max_source_positions") or 1024),
        }
        with open(os.path.join(new, DEPLOY_FILE), "w", encoding="utf-8") as f:
            json.dump(info, f, indent=2)
        replace_dir(new, out_dir)
    finally:
        if os.path.isdir(new):
            shutil.rmtree(new)
    info["model_bytes"] = os.path.getsize(os.path.join(out_dir, "model.bin"))
    info["out_dir"] = out_dir
    return info
