"""Command-line tools: data preparation, seq-KD data, evaluation, export."""
