"""The GPU benchmark (``bench/gpu_bench.py``), by concern: what is measured at which sizes
(:mod:`.plan`), the synthetic corpus (:mod:`.synthetic`), training steps and teacher caches
(:mod:`.training`), seq-KD decoding (:mod:`.decoding`), the run's progress lines and guarded
measurements (:mod:`.progress`), the whole run (:mod:`.run`) and its JSON and Markdown
(:mod:`.report`)."""
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
