# The two commands of the README. Each sets up .venv in the checkout when needed.
.PHONY: demo test
demo:
	bash scripts/demo.sh
test:
	bash scripts/test.sh
