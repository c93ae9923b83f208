# Every set-up step lives here: a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
MODELS ?= smollm2-135m gemma3-270m
export LLAMACPP_INTEGRATIONS_MODELS ?= $(CURDIR)/.cache/models
# llama-cpp-python compiles llama.cpp from source: use both cores.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2

.PHONY: install models demo test lint unit integration bench bench-images bench-loop llama-server bench-server clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,hub,langchain,llama-index]'
	touch $(STAMP)

install: $(STAMP)

models: install
	$(BIN)/llamacpp-integrations fetch $(MODELS)

demo: models
	$(BIN)/llamacpp-integrations demo

lint: install
	$(BIN)/ruff check llamacpp_integrations tests benchmarks
	$(BIN)/mypy

# Unit tests run on their own: in that session llama.cpp cannot be imported (tests/unit/conftest.py).
unit: install
	$(BIN)/pytest tests/unit

integration: models
	$(BIN)/pytest tests/integration

test: models lint
	$(BIN)/pytest tests/unit
	$(BIN)/pytest tests/integration tests/standard

bench: models
	$(BIN)/python benchmarks/throughput.py

bench-images: models
	$(BIN)/python benchmarks/images.py

bench-loop: models
	$(BIN)/python benchmarks/loop_stall.py

# llama.cpp's own server, built from the sources vendored in the installed llama-cpp-python's
# sdist (the same llama.cpp the engine runs), for the side-by-side benchmark only.
LLAMA_SERVER_DIR := .cache/llama-server
LLAMA_SERVER := $(LLAMA_SERVER_DIR)/build/bin/llama-server

$(LLAMA_SERVER): | install
	rm -rf $(LLAMA_SERVER_DIR) && mkdir -p $(LLAMA_SERVER_DIR)/src
	$(BIN)/python -m pip download --quiet --no-binary :all: --no-deps -d $(LLAMA_SERVER_DIR)/src \
		"llama-cpp-python==$$($(BIN)/python -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')"
	tar xzf $(LLAMA_SERVER_DIR)/src/*.tar.gz -C $(LLAMA_SERVER_DIR)/src
	cmake -S $(LLAMA_SERVER_DIR)/src/llama_cpp_python-*/vendor/llama.cpp -B $(LLAMA_SERVER_DIR)/build \
		-DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
		-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
	cmake --build $(LLAMA_SERVER_DIR)/build --target llama-server -j 2

llama-server: $(LLAMA_SERVER)

bench-server: models $(LLAMA_SERVER)
	$(BIN)/python benchmarks/llama_server.py --server $(LLAMA_SERVER)

clean:
	rm -rf $(VENV) .cache .pytest_cache .mypy_cache .ruff_cache
