"""Export a student checkpoint to CTranslate2 for deployment (raw text in, text out).

    fsd-export-ctranslate2 CHECKPOINT DATA_BIN OUT_DIR [--quantization int8|int8_float32|int16|float32]

DATA_BIN is the directory the student was trained on: its dictionaries (checked against the
model's own) and subword model are copied beside the converted model. A stock fairseq data-bin
(no fairseq_distill.json) works too: the languages come from the checkpoint, the subword model
from --subword-model or the one the directory holds (bpe.codes, a sentencepiece .model). Text is
segmented by that model alone: if yours was Moses-tokenized before BPE, tokenize the input the
same way. Translate with ``fsd-translate --backend ctranslate2 --model-dir OUT_DIR``.
"""

from fairseq_distill.cli.common import cli_parser, run_cli
from fairseq_distill.deploy.ctranslate2_export import QUANTIZATIONS, export_ctranslate2


def main(argv=None):
    p = cli_parser(__doc__)
    p.add_argument("checkpoint")
    p.add_argument("data_bin")
    p.add_argument("out_dir")
    p.add_argument("--quantization", default="int8", choices=QUANTIZATIONS, help="default int8")
    p.add_argument("--force", action="store_true", help="replace an earlier export in OUT_DIR (a folder holding anything else is never replaced)")
    p.add_argument("--subword-model", metavar="FILE",
                   help="the sentencepiece .model or subword-nmt codes the data were segmented with (default: "
                        "as fairseq_distill.json records, or the one DATA_BIN holds)")
    args = p.parse_args(argv)
    info = run_cli("export_ctranslate2", lambda: export_ctranslate2(args.checkpoint, args.data_bin, args.out_dir,
                                                                    args.quantization, args.force,
                                                                    args.subword_model))
    print(f"[export] {info['out_dir']}: {info['arch']} as CTranslate2 {info['quantization']}, "
          f"model.bin {info['model_bytes'] / 2**20:.1f} MiB, {info['source_lang']}->{info['target_lang']}")


if __name__ == "__main__":
    main()
