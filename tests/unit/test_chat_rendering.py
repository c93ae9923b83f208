"""Chat requests rendered through ``ChatTemplates``: the model's template and the ones requests
bring, compiled once and shared by callers on many threads."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

import pytest

from llamacpp_integrations.engine.types import ChatRequest
from llamacpp_integrations.errors import ChatTemplateError, InvalidRequestError
from llamacpp_integrations.prompts import chat_rendering
from llamacpp_integrations.prompts.chat_rendering import ChatTemplates

OWN = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
HELLO = [{"role": "user", "content": "hello"}]


def _brought(i: int) -> str:
    return f"[{i}]{{% for m in messages %}}{{{{ m.content }}}}{{% endfor %}}"


def test_the_models_template_and_a_requests_own() -> None:
    templates = ChatTemplates(OWN, bos_token="<s>", adds_bos=True)
    assert templates.render_chat(ChatRequest(messages=HELLO)) == "<user>hello"
    request = ChatRequest(messages=HELLO, chat_template="<s>" + _brought(1))
    assert templates.render_chat(request) == "[1]hello"  # the printed BOS dropped


def test_no_template_and_no_messages_are_typed_errors() -> None:
    with pytest.raises(ChatTemplateError, match="model 'x' has no chat template"):
        ChatTemplates(None, owner="model 'x'").render_chat(ChatRequest(messages=HELLO))
    with pytest.raises(InvalidRequestError, match="messages is empty"):
        ChatTemplates(OWN).render_chat(ChatRequest(messages=[]))


def test_request_templates_are_compiled_once_while_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    templates = ChatTemplates(OWN, capacity=2)
    compiled: list[str] = []
    compile_one = templates._compile

    def counting(source: str) -> chat_rendering.ChatTemplate:
        compiled.append(source)
        return compile_one(source)

    monkeypatch.setattr(templates, "_compile", counting)
    for i in (1, 2, 1, 3, 1, 2):
        templates.render_chat(ChatRequest(messages=HELLO, chat_template=_brought(i)))
    # 1 stays (used again before each eviction); 2 was evicted by 3 and compiled again.
    assert compiled == [_brought(1), _brought(2), _brought(3), _brought(2)]


@contextlib.contextmanager
def _switching_often() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def test_many_threads_share_a_small_cache() -> None:
    """Eviction by one thread while another finds the same template must never fail (an
    unlocked LRU raises KeyError from ``move_to_end`` then) nor render the wrong template."""
    templates = ChatTemplates(OWN, capacity=2)
    errors: list[BaseException] = []
    wrong: list[str] = []

    def worker(offset: int) -> None:
        try:
            for n in range(100):  # each miss compiles and probes a template again
                i = (n + offset) % 5
                text = templates.render_chat(ChatRequest(messages=HELLO, chat_template=_brought(i)))
                if text != f"[{i}]hello":
                    wrong.append(text)
        except BaseException as error:
            errors.append(error)

    with _switching_often():
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == [] and wrong == []
