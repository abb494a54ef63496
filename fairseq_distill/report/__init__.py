"""fsd-report's library part: a teacher and its students as deployed, in one report
(:mod:`.report`): inputs checked first (:mod:`.report_inputs`), one timed pass of one backend
(:mod:`.measure`), the alternating rounds (:mod:`.report_rounds`), their timings (:mod:`.timings`)
and the written report (:mod:`.report_output`). It sits above the parts it brings together:
the deployed forms (``deploy``), the scoring (``evaluation``) and the teachers' dictionaries
(``teacher``)."""
