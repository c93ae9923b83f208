"""The pytest plugin in pytest sessions of their own: each test's cassette named after it, the
record modes, the marker's options, and a replay that never makes the real engine."""

from __future__ import annotations

import textwrap

import pytest

pytest_plugins = ["pytester"]

TEST_FILE = """
from llamacpp_integrations.engine import ChatMessage, ChatRequest, SamplingParams
from llamacpp_integrations.testing import ScriptedEngine

def chat(seed=None):
    return ChatRequest(
        messages=[ChatMessage(role="user", content="Hi")],
        sampling=SamplingParams(temperature=0.0, seed=seed),
    )

def real():
    return ScriptedEngine(script=[("", "Hello"), ("", " from the model")])

def no_model():
    raise AssertionError("a replay made the real engine")

def test_answer(llamacpp_cassette, request):
    make = real if request.config.getoption("--llamacpp-record-mode") != "none" else no_model
    engine = llamacpp_cassette.engine(make)
    assert engine.generate(chat()).text == "Hello from the model"
"""


@pytest.fixture(autouse=True)
def _ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")


def _cassette(pytester: pytest.Pytester, name: str = "test_answer") -> str:
    path = pytester.path / "cassettes" / "test_plugin" / f"{name}.llamacpp.jsonl"
    return str(path) if path.exists() else ""


def test_once_records_then_none_replays_without_the_model(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plugin=TEST_FILE)
    pytester.runpytest("--llamacpp-record-mode=once").assert_outcomes(passed=1)
    assert _cassette(pytester)
    pytester.runpytest().assert_outcomes(passed=1)  # none, the default: replay only
    pytester.runpytest("--llamacpp-record-mode=once").assert_outcomes(passed=1)  # no record


def test_replay_of_a_missing_cassette_fails_saying_how_to_record(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_plugin=TEST_FILE)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*CassetteFormatError*record it first*"])


def test_recording_without_a_real_engine_is_a_clear_failure(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_plugin="""
        def test_answer(llamacpp_cassette):
            llamacpp_cassette.engine()
        """
    )
    result = pytester.runpytest("--llamacpp-record-mode=all")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*needs a real engine*"])


def test_the_marker_names_the_cassette_and_loosens_matching(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_plugin=TEST_FILE
        + textwrap.dedent(
            """
            import pytest

            @pytest.mark.llamacpp_cassette("shared", ignore_seed=True)
            def test_seeded(llamacpp_cassette):
                engine = llamacpp_cassette.engine(real)
                seed = 1 if llamacpp_cassette.replaying else 2
                assert engine.generate(chat(seed)).text == "Hello from the model"
            """
        )
    )
    pytester.runpytest("--llamacpp-record-mode=all").assert_outcomes(passed=2)
    assert _cassette(pytester, "shared")
    pytester.runpytest().assert_outcomes(passed=2)


def test_new_episodes_appends_what_the_cassette_lacks(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plugin=TEST_FILE)
    pytester.runpytest("--llamacpp-record-mode=once").assert_outcomes(passed=1)
    pytester.makepyfile(
        test_plugin=TEST_FILE.replace(
            "engine.generate(chat())",
            "engine.generate(chat(seed=7)).text and engine.generate(chat())",
        )
    )
    pytester.runpytest().assert_outcomes(failed=1)  # the seeded request is not recorded
    pytester.runpytest("--llamacpp-record-mode=new_episodes").assert_outcomes(passed=1)
    with open(_cassette(pytester)) as cassette:
        assert len(cassette.read().splitlines()) == 3  # header, the first call, the new one
    pytester.runpytest().assert_outcomes(passed=1)
