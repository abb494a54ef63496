"""fairseq_distill: knowledge distillation for fairseq Transformer translation models.

Installed as an ordinary package; fairseq loads it with ``--user-dir``.
"""
from setuptools import find_packages, setup

setup(
    name="fairseq_distill",
    version="0.1.0",
    description="A fairseq plugin that distils large Transformer translation models into small ones",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["fairseq_distill", "fairseq_distill.*"]),
    install_requires=[
        "torch>=1.13",
        # fairseq 0.12.2 does not import on Python >= 3.11 (mutable dataclass
        # defaults); fairseq-fixed is fairseq main with that fixed.
        'fairseq-fixed==0.12.3.1; python_version>="3.11"',
        'fairseq==0.12.2; python_version<"3.11"',
        "sacrebleu>=2.0",
        "sentencepiece",
        "subword-nmt",
        "tqdm",
        "pyyaml",
    ],
    extras_require={
        "test": ["pytest", "pytest-xdist", "matplotlib", "scipy", "ctranslate2>=4.0", "sacremoses", "transformers"],
        "plots": ["matplotlib"],
        "deploy": ["ctranslate2>=4.0"],  # CTranslate2 export and backend
        "teachers": ["ctranslate2>=4.0", "transformers"],  # fsd-seqkd --teacher-ctranslate2 with a Hugging Face tokenizer
        "recipes": ["sacremoses"],  # the benchmark recipes' Moses tokenisation
        # everything the README and the guides go on to use: CTranslate2 (export, fsd-report,
        # --backend ctranslate2), the report's plot, Hugging Face tokenizers, Moses tokenisation
        "all": ["ctranslate2>=4.0", "matplotlib", "transformers", "sacremoses"],
    },
    entry_points={
        "console_scripts": [
            "fsd-prepare-corpus=fairseq_distill.cli.prepare_corpus:main",
            "fsd-seqkd=fairseq_distill.cli.seqkd:main",
            "fsd-evaluate=fairseq_distill.cli.evaluate:main",
            "fsd-export-student=fairseq_distill.cli.export_student:main",
            "fsd-alp-heatmap=fairseq_distill.cli.alp_heatmap:main",
            "fsd-a2d-heatmap=fairseq_distill.cli.a2d_heatmap:main",
            "fsd-extract-student=fairseq_distill.cli.extract_student:main",
            "fsd-export-ctranslate2=fairseq_distill.cli.export_ctranslate2:main",
            "fsd-translate=fairseq_distill.cli.translate:main",
            "fsd-depth-strategies=fairseq_distill.cli.depth_strategies:main",
            "fsd-export-subnetwork=fairseq_distill.cli.export_subnetwork:main",
            "fsd-evaluate-depths=fairseq_distill.cli.evaluate_depths:main",
            "fsd-compare=fairseq_distill.cli.compare:main",
            "fsd-cache-teacher=fairseq_distill.cli.cache_teacher:main",
            "fsd-benchmark-corpus=fairseq_distill.cli.benchmark_corpus:main",
            "fsd-benchmark-score=fairseq_distill.cli.benchmark_score:main",
            "fsd-report=fairseq_distill.cli.report:main",
            "fsd-options=fairseq_distill.cli.options:main",
        ]
    },
)
