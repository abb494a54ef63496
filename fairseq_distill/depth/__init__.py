"""Depth as a knob: GPKD students extracted from a deep teacher's layers (:mod:`.extraction`)
and the layer choices of flexible-depth models (:mod:`.strategies`)."""
