"""The OpenMP spin settings are in the environment only while llama.cpp loads, and never over
the user's own (``engine/openmp_env.py``)."""

from __future__ import annotations

from llamacpp_integrations.engine.openmp_env import SPIN_SETTINGS, openmp_spin_settings


def test_the_settings_are_there_for_the_block_and_gone_after() -> None:
    env = {"PATH": "/usr/bin"}
    with openmp_spin_settings(env, platform="linux") as applied:
        assert applied
        assert env == {"PATH": "/usr/bin", **SPIN_SETTINGS}
    assert env == {"PATH": "/usr/bin"}


def test_they_are_taken_away_when_the_import_fails() -> None:
    env: dict[str, str] = {}
    try:
        with openmp_spin_settings(env, platform="linux"):
            raise ImportError("no llama_cpp")
    except ImportError:
        pass
    assert env == {}


def test_a_setting_of_the_users_leaves_libgomp_to_them() -> None:
    for name in SPIN_SETTINGS:
        env = {name: "passive" if name == "OMP_WAIT_POLICY" else "1000"}
        before = dict(env)
        with openmp_spin_settings(env, platform="linux") as applied:
            assert not applied
            assert env == before
        assert env == before


def test_nothing_changes_off_linux() -> None:
    for platform in ("darwin", "win32"):
        env: dict[str, str] = {}
        with openmp_spin_settings(env, platform=platform) as applied:
            assert not applied and env == {}


def test_a_value_changed_inside_the_block_is_left_alone() -> None:
    env: dict[str, str] = {}
    with openmp_spin_settings(env, platform="linux"):
        env["GOMP_SPINCOUNT"] = "5"  # someone else's, set meanwhile
    assert env == {"GOMP_SPINCOUNT": "5"}
