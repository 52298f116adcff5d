# The two commands of the README. Both create .venv and install requirements.txt if needed.
PYTHON ?= python3

.PHONY: run test lint

run:  ## Start the whole lab (Redis if needed, Celery worker, daphne); Ctrl-C stops it.
	@$(PYTHON) scripts/run_lab.py

test:  ## The whole test suite, then the model/service tests again on PostgreSQL.
	@$(PYTHON) scripts/test.py $(ARGS)

lint:
	@.venv/bin/ruff check .
