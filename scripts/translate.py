#!/usr/bin/env python3
"""Translate raw text with a student (fairseq or CTranslate2 backend): see --help."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fairseq_distill.cli.translate import main  # noqa: E402

if __name__ == "__main__":
    main()
