"""What the runner sets up or notes about the machine it runs on."""
# A recipe step repeated with the same seed gives bit-identical weights on one machine; on
# another machine it need not (CPU float kernels may round differently), so each record names
# the CPU (cpu_model) to say which runs could have reproduced each other.
from fairseq_distill.machine import cpu_model  # noqa: F401

# glibc serves every allocation above 32 MiB with a fresh mmap() and unmaps it on free, so
# the B x T x V tensors of each training step (logits, log-probabilities, KD terms) are
# page-faulted anew every step: on the 2-core CPU here a word-KD step spent a third of its
# time in the kernel. Keeping freed memory in the heap (no mmap, no trimming) made the
# step faster with identical numbers. Values the user sets win. Training runs only:
# evaluations keep the default so that decoding speeds compare with earlier rows.
HEAP_MALLOC = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**40)}

# Wall times of rows trained under different set-ups do not compare; the record says which.
SPEED_SETUP = "fused KD term, heap malloc (2026-11-23)"
