# Everything installs itself: a fresh clone needs only Python 3.10+, Java 17+ and Maven
# (or KAFKA_HOME / KAFKA_BOOTSTRAP_SERVERS, or a Docker engine).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test docs lint typecheck check bench soak clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## make demo: start the embedded broker and show SafeConsumer at work
demo: $(STAMP)
	$(PY) -m examples.demo

## make test: lint, type-check, then every test against a real broker
test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(PY) -m mkdocs build --strict --quiet
	$(PY) -m pytest

## make docs: build the documentation site (strict) into .site/
docs: $(STAMP)
	$(PY) -m mkdocs build --strict

lint: $(STAMP)
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

typecheck: $(STAMP)
	$(PY) -m mypy

bench: $(STAMP)
	$(PY) -m benchmarks.throughput

## make soak: member processes started, killed and terminated at random, under every protocol
## (SOAK_SECONDS of chaos each, default 180); fails on any lost record or invariant violation
SOAK_SECONDS ?= 180
soak: $(STAMP)
	$(PY) -m tests.soak.run --seconds $(SOAK_SECONDS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
