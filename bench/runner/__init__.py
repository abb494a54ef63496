"""The recipe runner behind the demo and the benchmarks (front end: ``bench/run.py``).

A recipe (``configs/*.yaml``) is a list of training, seq-KD and evaluation steps. The
runner works in four stages, one module each:

* :mod:`.config`   reads the YAML (``extends`` resolved) and checks it;
* :mod:`.plan`     turns it, without running anything, into each step's cache key, directory
                   and command lines (the argv lists ``--print-commands`` prints);
* :mod:`.execute`  runs those argv lists, step by step, resuming and reusing finished work
                   (:mod:`.progress` is what a person sees meanwhile; :mod:`.host` the
                   machine-specific set-up);
* :mod:`.records`  turns a finished step's files into its record (kept in its directory),
                   and :mod:`.results` writes the results JSON and Markdown table from them.
"""
