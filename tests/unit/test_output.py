"""Tests of the per-request output processor (UTF-8 reassembly and stop strings)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llamacpp_integrations.engine.types import CompletionRequest
from llamacpp_integrations.engine.worker.output import OutputProcessor
from llamacpp_integrations.errors import InvalidRequestError


def run(
    pieces: Sequence[bytes], stop: Sequence[str] = ()
) -> tuple[list[str], str, OutputProcessor]:
    """Feed every piece, then flush; return the per-feed outputs, the flush output and the proc."""
    proc = OutputProcessor(stop)
    outs = [proc.feed(p) for p in pieces]
    return outs, proc.flush(), proc


def split_bytes(data: bytes, cuts: Sequence[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c for c in cuts if 0 < c < len(data))})
    return [data[a:b] for a, b in itertools.pairwise(points)]


# --- UTF-8 -------------------------------------------------------------------------------------


def test_plain_ascii_is_emitted_immediately() -> None:
    outs, tail, proc = run([b"Hello", b", ", b"world"])
    assert outs == ["Hello", ", ", "world"]
    assert tail == ""
    assert proc.text == "Hello, world"
    assert not proc.stopped


def test_two_byte_char_split_over_two_pieces() -> None:
    data = "é".encode()
    outs, _, proc = run([b"caf" + data[:1], data[1:] + b"!"])
    assert outs == ["caf", "é!"]
    assert proc.text == "café!"


def test_three_byte_char_split_over_three_pieces() -> None:
    data = "€".encode()
    assert len(data) == 3
    outs, _, proc = run([data[:1], data[1:2], data[2:] + b"5"])
    assert outs == ["", "", "€5"]
    assert proc.text == "€5"


def test_emoji_split_byte_by_byte() -> None:
    data = "😀".encode()
    assert len(data) == 4
    outs, _, proc = run([bytes([b]) for b in data])
    assert outs == ["", "", "", "😀"]
    assert proc.text == "😀"


def test_invalid_bytes_are_replaced() -> None:
    outs, _, proc = run([b"a\xffb", b"\xc3("])
    assert outs == ["a\ufffdb", "\ufffd("]
    assert proc.text == "a\ufffdb\ufffd("


def test_incomplete_utf8_tail_is_replaced_on_flush() -> None:
    outs, tail, proc = run([b"ok", "€".encode()[:2]])
    assert outs == ["ok", ""]
    assert tail == "\ufffd"
    assert proc.text == "ok\ufffd"


# --- stop strings ------------------------------------------------------------------------------


def test_stop_string_in_one_piece() -> None:
    outs, tail, proc = run([b"Hello", b" END there"], stop=["END"])
    assert outs == ["Hello", " "]
    assert tail == ""
    assert proc.stopped
    assert proc.stop_string == "END"
    assert proc.text == "Hello "


def test_stop_string_split_across_pieces() -> None:
    outs, _, proc = run([b"foo<|", b"im_", b"end|>bar"], stop=["<|im_end|>"])
    assert outs == ["foo", "", ""]
    assert proc.stopped
    assert proc.text == "foo"


def test_stop_string_split_inside_a_multibyte_char() -> None:
    data = "x€y".encode()
    outs, _, proc = run([data[:2], data[2:]], stop=["€y"])
    assert "".join(outs) == "x"
    assert proc.stopped


def test_partial_prefix_that_is_not_a_stop_is_released() -> None:
    outs, _, proc = run([b"ab", b"x"], stop=["abc"])
    assert outs == ["", "abx"]
    assert not proc.stopped
    assert proc.text == "abx"


def test_partial_prefix_is_released_from_its_first_non_matching_char() -> None:
    # "aab": the first "a" can no longer start "abc" once the second "a" arrives.
    outs, _, _ = run([b"a", b"a", b"b", b"d"], stop=["abc"])
    assert outs == ["", "a", "", "abd"]


def test_overlapping_stops_cut_at_earliest_start() -> None:
    outs, _, proc = run([b"x", b"a", b"b", b"c", b"d"], stop=["bcd", "abc"])
    assert "".join(outs) == "x"
    assert proc.stop_string == "abc"
    assert proc.text == "x"


def test_overlapping_stops_in_one_piece() -> None:
    _, _, proc = run([b"xabcd"], stop=["bcd", "abc"])
    assert proc.text == "x"
    assert proc.stop_string == "abc"


def test_longer_stop_wins_when_it_starts_earlier() -> None:
    # Both stops complete with the same piece; the one that starts first decides the cut.
    outs, _, proc = run([b"-", b"xa", b"bq"], stop=["xabq", "bq"])
    assert "".join(outs) == "-"
    assert proc.stop_string == "xabq"


def test_stop_at_the_very_beginning() -> None:
    outs, tail, proc = run([b"</s>", b"more"], stop=["</s>"])
    assert outs == ["", ""]
    assert tail == ""
    assert proc.stopped
    assert proc.text == ""


def test_feeds_after_stop_return_nothing() -> None:
    proc = OutputProcessor(["STOP"])
    assert proc.feed(b"aSTOPb") == "a"
    assert proc.feed(b"more text") == ""
    assert proc.flush() == ""
    assert proc.text == "a"


def test_flush_emits_held_back_partial_stop() -> None:
    outs, tail, proc = run([b"answer <|im"], stop=["<|im_end|>"])
    assert outs == ["answer "]
    assert tail == "<|im"
    assert not proc.stopped
    assert proc.text == "answer <|im"


def test_no_stops_emits_everything() -> None:
    outs, tail, proc = run([b"a", b"b"])
    assert outs == ["a", "b"]
    assert tail == ""
    assert proc.text == "ab"


def test_text_property_tracks_emitted_text() -> None:
    proc = OutputProcessor(["zz"])
    assert proc.text == ""
    proc.feed(b"ab")
    assert proc.text == "ab"
    proc.feed(b"cz")
    assert proc.text == "abc"
    proc.feed(b"d")
    assert proc.text == "abczd"


def test_complete_stop_waits_for_a_longer_one_that_starts_earlier() -> None:
    # At "xab" the stop "ab" is complete, but "xabq" (starting earlier) may still complete: the
    # processor waits one more piece so that the cut does not depend on how text is tokenized.
    proc = OutputProcessor(["xabq", "ab"])
    assert [proc.feed(p) for p in (b"x", b"a", b"b")] == ["", "", ""]
    assert not proc.stopped
    assert proc.feed(b"q") == ""
    assert proc.stopped
    assert proc.stop_string == "xabq"
    assert proc.text == ""


def test_complete_stop_applies_once_the_longer_one_fails() -> None:
    proc = OutputProcessor(["xabq", "ab"])
    assert [proc.feed(p) for p in (b"x", b"a", b"b")] == ["", "", ""]
    assert proc.feed(b"z") == "x"
    assert proc.stopped
    assert proc.stop_string == "ab"


def test_complete_stop_applies_at_flush_while_waiting() -> None:
    proc = OutputProcessor(["xabq", "ab"])
    assert proc.feed(b"-xab") == "-"
    assert proc.flush() == "x"
    assert proc.stopped
    assert proc.text == "-x"


@pytest.mark.parametrize("stop", [[""], "abc", [1]])
def test_bad_stop_sequences_are_rejected(stop: object) -> None:
    # Checked once, on the request, before the worker's output processor sees them.
    request = CompletionRequest(prompt="x", stop=stop)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError):
        request.validate_common(n_vocab=100)


# --- property ----------------------------------------------------------------------------------

ALPHABET = st.sampled_from("ab c\n<|>é€😀")


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, list[str], list[bytes]]:
    text = draw(st.text(ALPHABET, max_size=40))
    # Stop strings are random, or substrings of the text so that they actually occur.
    stops: list[str] = []
    for _ in range(draw(st.integers(0, 3))):
        if text and draw(st.booleans()):
            i = draw(st.integers(0, len(text) - 1))
            j = draw(st.integers(i + 1, min(len(text), i + 6)))
            stops.append(text[i:j])
        else:
            stops.append(draw(st.text(ALPHABET, min_size=1, max_size=5)))
    data = text.encode()
    cuts = draw(st.lists(st.integers(0, len(data)), max_size=len(data) + 1))
    return text, stops, split_bytes(data, cuts)


@settings(max_examples=500, deadline=None)
@given(cases())
def test_output_equals_text_truncated_at_first_stop(
    case: tuple[str, list[str], list[bytes]],
) -> None:
    text, stops, pieces = case
    hits = [i for i in (text.find(s) for s in stops) if i != -1]
    expected = text[: min(hits)] if hits else text
    outs, tail, proc = run(pieces, stops)
    assert "".join(outs) + tail == expected
    assert proc.text == expected
    assert proc.stopped == bool(hits)
    # Never emits anything a later token could turn into a stop string.
    for i in range(len(outs)):
        so_far = "".join(outs[: i + 1])
        assert so_far == expected[: len(so_far)]
