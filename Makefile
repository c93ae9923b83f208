# Every set-up step lives here: a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
MODELS ?= smollm2-135m gemma3-270m
export LLAMACPP_INTEGRATIONS_MODELS ?= $(CURDIR)/.cache/models
# llama-cpp-python compiles llama.cpp from source: use both cores.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2

.PHONY: install models demo test lint unit integration bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,hub]'
	touch $(STAMP)

install: $(STAMP)

models: install
	$(BIN)/llamacpp-integrations fetch $(MODELS)

demo: models
	$(BIN)/llamacpp-integrations demo

lint: install
	$(BIN)/ruff check llamacpp_integrations tests benchmarks
	$(BIN)/mypy

unit: install
	$(BIN)/pytest tests/unit

integration: models
	$(BIN)/pytest tests/integration

test: models lint
	$(BIN)/pytest

bench: models
	$(BIN)/python benchmarks/throughput.py

clean:
	rm -rf $(VENV) .cache .pytest_cache .mypy_cache .ruff_cache
