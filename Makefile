# planq dev loop. Every target creates .venv and installs the project if needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: demo test test-compose lint unit format bench clean docs

# setuptools says "Editable installation: folders in your working directory with the same
# name as your package may take precedence" on every editable install that maps a package
# to another folder (planq -> .). There is no planq/ folder here to take precedence, so
# that one notice is silenced; every other build warning still prints (and fails
# tests/integration/test_packaging.py).
EDITABLE_QUIET := PYTHONWARNINGS="ignore:Editable installation"

$(STAMP): pyproject.toml
	@echo "planq: creating $(VENV) and installing planq with its dev tools (first run: about a minute)..."
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(EDITABLE_QUIET) $(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/planq demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@# mypy cannot follow setuptools' editable mapping: give it planq/ -> this folder.
	@mkdir -p .typecheck && ln -sfn .. .typecheck/planq
	MYPYPATH=.typecheck $(BIN)/mypy --strict -p planq.domain -p planq.store -p planq.tasks -p planq.worker_config -p planq.cli
	$(BIN)/lint-imports
	$(BIN)/python .ci/import_cycles.py .

# Bytecode for every process the suite starts (CLI calls, `celery worker`s, the fleet) is
# cached under .venv, so each one does not compile planq from source again: a machine that
# sets PYTHONDONTWRITEBYTECODE (this one does) would otherwise pay it on every start.
PYCACHE := PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/$(VENV)/pycache

# The suite in two groups (docs/testing.md): the parallel group over $(TEST_WORKERS) xdist
# workers, each on Redis databases, ports and PostgreSQL databases of its own, then the
# serial group (it restarts the shared Redis and PostgreSQL) alone; then the 15 slowest
# tests and the totals. `make test GROUP=serial`, `make test PYTEST_ARGS="-k cancel"`.
TEST_WORKERS ?= 3
GROUP ?= all

test: lint
	$(PYCACHE) $(BIN)/python tests/suite.py --group $(GROUP) --workers $(TEST_WORKERS) -- $(PYTEST_ARGS)

# The docker-compose fleet end to end; needs a Docker engine (not part of `make test`).
test-compose: $(STAMP)
	$(BIN)/python -m pytest tests/docker $(PYTEST_ARGS)

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/python bench/throughput.py

# docs/reference/ (settings, CLI, HTTP routes) generated from the code;
# tests/unit/test_reference_docs.py fails when a committed page differs.
docs: $(STAMP)
	$(BIN)/python .ci/reference_docs.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .typecheck planq.db*
