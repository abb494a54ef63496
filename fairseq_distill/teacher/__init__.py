"""The teacher during student training: frozen models run beside the student
(:mod:`.frozen`), or their top-k outputs computed once and read back (:mod:`.cache`,
written by :mod:`.cache_writer`)."""
