#!/usr/bin/env python3
"""Export one depth pair of a flexible-depth model as an ordinary transformer: see --help."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fairseq_distill.cli.export_subnetwork import main  # noqa: E402

if __name__ == "__main__":
    main()
