"""llama.cpp's libraries load with the engine's OpenMP spin settings in the environment, and
the environment is as it was once they have loaded (``engine/openmp_env.py``).

In a fresh process, so that ``llama_cpp`` is imported there for the first time.
"""

from __future__ import annotations

import os
import sys

import pytest

from llamacpp_integrations.engine.openmp_env import SPIN_SETTINGS

from .helpers import in_fresh_process

SCRIPT = """
import json, os, sys
seen = []
names = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
sys.addaudithook(
    lambda event, args: seen.append({n: os.environ.get(n) for n in names})
    if event == "ctypes.dlopen" else None
)
import llamacpp_integrations.engine.native  # noqa: F401
print(json.dumps({"at_load": seen, "after": {n: os.environ.get(n) for n in names}}))
"""


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in SPIN_SETTINGS}


@pytest.mark.skipif(sys.platform != "linux", reason="the settings are libgomp's, on Linux")
def test_llama_cpp_loads_with_the_spin_settings_and_the_environment_is_restored() -> None:
    found = in_fresh_process(SCRIPT, env=_clean_env())
    assert found["at_load"], "llama_cpp loaded no library through ctypes"
    assert all(seen == SPIN_SETTINGS for seen in found["at_load"])
    assert found["after"] == {name: None for name in SPIN_SETTINGS}


@pytest.mark.skipif(sys.platform != "linux", reason="the settings are libgomp's, on Linux")
def test_a_users_setting_is_kept() -> None:
    found = in_fresh_process(SCRIPT, env={**_clean_env(), "OMP_WAIT_POLICY": "passive"})
    expected = {"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": None}
    assert all(seen == expected for seen in found["at_load"])
    assert found["after"] == expected
