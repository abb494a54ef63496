#!/usr/bin/env python3
"""Extract a shallow student from a deep (group-permuted) teacher: see --help.

    scripts/extract_student.py TEACHER.pt STUDENT.pt [--keep top|bottom|random|all|LIST]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fairseq_distill.cli.extract_student import main  # noqa: E402

if __name__ == "__main__":
    main()
