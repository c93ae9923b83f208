"""The weights load ends with one full pass of the garbage collector, while the caller waits
for the load anyway, so that the first automatic one (about 100 ms with both frameworks
imported) does not fall in the first burst of requests.

In a fresh process, so that no other test has loaded the weights already.
"""

from __future__ import annotations

from pathlib import Path

from .helpers import in_fresh_process

SCRIPT = """
import gc, json, sys, threading
from llamacpp_integrations.engine import Engine, EngineConfig

full = []
gc.callbacks.append(
    lambda phase, info: full.append(threading.current_thread().name)
    if phase == "start" and info["generation"] == 2 else None
)
engine = Engine(EngineConfig(model=sys.argv[1], n_threads=2, n_seq_max=1))
print(json.dumps({"full_passes": full}))
engine.close()
"""


def test_the_weights_load_ends_with_a_full_collection(smollm_path: Path) -> None:
    found = in_fresh_process(SCRIPT, str(smollm_path))
    assert any(name.startswith("llamacpp-engine:") for name in found["full_passes"])
