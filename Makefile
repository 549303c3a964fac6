# The two commands a new user needs: `make run` and `make test`. Both create .venv and install on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test install lint clean constraints

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first and pinned: left to the resolver it pulls a multi-GB CUDA build.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	# -qq: setuptools prints an "editable installation" notice for every flat-layout editable install; errors still show.
	# -c: the versions this tree was tested with (constraints.txt), not whatever was released since.
	$(BIN)/python -m pip install -qq -c constraints.txt -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

## Start the sidecar on ./inbox with the embedded Postgres (or CONNECTOR_DSN when set).
run: $(STAMP)
	$(BIN)/connector run

## Lint, then the whole test suite against a real Postgres with pgvector.
test: $(STAMP) lint
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check connector migrations tests
	$(BIN)/ruff format --check connector migrations tests

## Resolve the dependencies afresh (a scratch venv, no constraints) and write what they resolved to constraints.txt.
constraints:
	rm -rf .constraints-venv && $(PYTHON) -m venv .constraints-venv
	.constraints-venv/bin/python -m pip install --quiet --upgrade pip
	.constraints-venv/bin/python -m pip install --quiet torch==2.13.0
	.constraints-venv/bin/python -m pip install -qq -e '.[test]'
	{ sed -n '/^#/p' constraints.txt; .constraints-venv/bin/python -m pip freeze --exclude-editable | grep -v -E '^(torch|triton|nvidia-[a-z0-9-]+)=='; } > constraints.txt.new
	mv constraints.txt.new constraints.txt && rm -rf .constraints-venv

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
