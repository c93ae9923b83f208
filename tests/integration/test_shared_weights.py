"""One copy of a model's weights per process, whatever each adapter asks for, and engines that
share weights serving side by side.

The four adapters below differ in serving settings (a projector, a longer context, none at
all), so the registry gives them different engines; those engines must still share one load of
the GGUF. Counted the way the kernel sees it: the file's mappings in ``/proc/self/maps``, in a
fresh process so that no other test's engine is in the count.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from llamacpp_integrations.engine import Engine, EngineConfig
from llamacpp_integrations.engine.worker.host import loaded_weights
from llamacpp_integrations.errors import EngineClosedError

from .helpers import QUESTIONS, chat, wait_for

ROOT = Path(__file__).resolve().parents[2]

ADAPTERS_SCRIPT = """
import json, sys
from llamacpp_integrations.langchain import ChatLlamaCpp, LlamaCppEmbeddings
from llamacpp_integrations.llama_index import LlamaCpp, LlamaCppEmbedding
from llamacpp_integrations.engine import live_engines

model, projector = sys.argv[1], sys.argv[2]

def mappings(path):
    with open("/proc/self/maps") as maps:
        return sum(1 for line in maps if line.rstrip().endswith(path))

chat = ChatLlamaCpp(model=model, mmproj=projector, max_tokens=2, temperature=0)
embeddings = LlamaCppEmbeddings(model=model)
llm = LlamaCpp(model=model, n_ctx_per_seq=4096, max_tokens=2, temperature=0)
embedding = LlamaCppEmbedding(model=model)
chat.invoke("Hi")
embeddings.embed_query("hello")
llm.complete("Hi")
embedding.get_text_embedding("hello")
engines = {id(chat.binding.get()), id(embeddings.binding.get()), id(llm.engine),
           id(embedding.engine)}
print(json.dumps({"mappings": mappings(model), "engines": len(engines),
                  "live": len(live_engines())}))
"""

OVERRIDE_SCRIPT = """
import json, sys
from llamacpp_integrations.engine import registry
from llamacpp_integrations.langchain import ChatLlamaCpp

model, other = sys.argv[1], sys.argv[2]
opened = []
open_engine = registry.open_local_engine
def counting(config):
    opened.append(config.model)
    return open_engine(config)
registry.open_local_engine = counting

def regions(path):
    with open("/proc/self/maps") as maps:
        return [line.split()[0] for line in maps if line.rstrip().endswith(path)]

# The other test model's GGUF carries no chat template: give one per call.
template = "{% for m in messages %}{{ m.content }} {% endfor %}"
llm = ChatLlamaCpp(model=model, max_tokens=2, temperature=0)
seen = []
for _ in range(5):
    reply = llm.invoke("Hi", model=other, chat_template=template)
    assert reply.response_metadata["model_name"] == other
    seen.append(regions(other))
print(json.dumps({"loads": opened.count(other), "regions": seen}))
"""


def _run(script: str, *args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_four_adapters_with_different_settings_map_the_gguf_once(
    smollm_path: Path, projector: Path
) -> None:
    result = _run(ADAPTERS_SCRIPT, str(smollm_path.resolve()), str(projector))
    # Three configurations (projector; 4096-token context; defaults shared by both
    # embedders), one copy of the weights.
    assert result == {"mappings": 1, "engines": 3, "live": 3}


def test_a_per_call_model_override_loads_once_across_five_calls(
    smollm_path: Path, gemma_path: Path
) -> None:
    result = _run(OVERRIDE_SCRIPT, str(smollm_path.resolve()), str(gemma_path.resolve()))
    assert result["loads"] == 1
    regions = result["regions"]
    assert isinstance(regions, list) and len(regions) == 5
    assert all(len(r) == 1 for r in regions) and len({r[0] for r in regions}) == 1


def test_engines_on_shared_weights_serve_side_by_side_without_cross_talk(
    smollm_path: Path,
) -> None:
    model = str(smollm_path)
    # Deterministic: each sequence decodes on its own, so the answers may be compared token
    # for token whatever else runs (in a shared batch, kernels round differently).
    with (
        Engine(
            EngineConfig(model=model, n_seq_max=2, n_ctx_per_seq=512, deterministic=True)
        ) as small,
        Engine(
            EngineConfig(model=model, n_seq_max=4, n_ctx_per_seq=1024, deterministic=True)
        ) as large,
    ):
        assert loaded_weights().count(small.config.weights) == 1
        requests = [chat(question, max_tokens=24) for question in QUESTIONS[:4]]
        alone = [small.generate(r).text for r in requests[:2]]
        alone += [large.generate(r).text for r in requests[2:]]
        # Both engines at once: their steps take turns on the one worker thread.
        with ThreadPoolExecutor(4) as pool:
            together = list(
                pool.map(
                    lambda pair: pair[0].generate(pair[1]).text,
                    [(small, requests[0]), (small, requests[1]),
                     (large, requests[2]), (large, requests[3])],
                )
            )  # fmt: skip
        # Greedy and deterministic: the same text, and no engine's answer leaked into another's.
        assert together == alone


def test_closing_one_engine_ends_its_requests_while_the_weights_serve_on(
    smollm_path: Path,
) -> None:
    model = str(smollm_path)
    with Engine(EngineConfig(model=model, n_seq_max=2)) as other:
        engine = Engine(EngineConfig(model=model, n_seq_max=1, n_ctx_per_seq=512))
        running = engine.submit(chat("Tell me a long story.", max_tokens=300, ignore_eos=True))
        wait_for(engine, lambda stats: stats.running == 1)
        waiting = engine.submit(chat("Wait.", max_tokens=4))
        engine.close()
        for handle in (running, waiting):
            with pytest.raises(EngineClosedError):
                handle.result()
        assert engine.closed and not other.closed
        assert other.generate(chat("Hi", max_tokens=2)).usage.completion_tokens > 0
