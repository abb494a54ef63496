# The two commands of the README (demo, test) and the developers' fast tier. Each sets up
# .venv in the checkout when needed. PYTEST_ARGS go to pytest, e.g. PYTEST_ARGS="-k a2d -x".
.PHONY: demo test test-fast
demo:
	bash scripts/demo.sh
# every test: the fast tier, then the slow one (subprocess fairseq-train/generate and CLI runs)
test:
	bash scripts/test.sh all $(PYTEST_ARGS)
# unit tests and tiny in-process runs, under 5 minutes: run on every change
test-fast:
	bash scripts/test.sh fast $(PYTEST_ARGS)
