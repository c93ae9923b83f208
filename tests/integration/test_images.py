"""The engine's image path on real models, with tiny random-weight projectors.

SmolLM2-135M runs with a llava 1.5-style projector (``tests/builders/tiny_projector.py``) and
Gemma 3 270M with a Gemma 3-style one. Their weights are random, so they prove the plumbing, not
understanding: pixels are preprocessed and encoded by libmtmd, their embeddings are decoded into
the request's own sequence beside other requests, the answer depends on the image, token counts
include the image, and cached prefixes (image included) are reused. What the model "sees" in an
image is meaningless.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from llamacpp_integrations.engine import (
    ChatMessage,
    ChatRequest,
    Completion,
    CompletionRequest,
    Engine,
    EngineConfig,
    ImageInput,
    InferenceEngine,
    SamplingParams,
)
from llamacpp_integrations.errors import (
    ContextOverflowError,
    ImageInputNotSupportedError,
    InvalidRequestError,
    ModelLoadError,
    RequestCancelledError,
)
from llamacpp_integrations.multimodal import load_image
from tests.builders.tiny_projector import build_tiny_projector
from tests.builders.tiny_qwen2vl import build_tiny_qwen2vl
from tests.conftest import ENGINES
from tests.integration.helpers import agree_up_to_a_tie, idle_and_freed, repeat_kept_all, wait_for

GREEDY = SamplingParams(temperature=0.0)
# How far apart two top tokens may be for batched rounding to flip the greedy choice.
TIE_NATS = 0.35
SYSTEM = (
    "You are a careful assistant who describes pictures for people who cannot see them. "
    "Describe colours, shapes, any text and the overall layout, in one short sentence."
)


def png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def solid(color: tuple[int, int, int], size: tuple[int, int] = (64, 64)) -> ImageInput:
    return load_image(png(Image.new("RGB", size, color)))


def noise(seed: int, size: tuple[int, int] = (100, 40)) -> ImageInput:
    import random

    rng = random.Random(seed)
    data = bytes(rng.randrange(256) for _ in range(size[0] * size[1] * 3))
    return ImageInput(size[0], size[1], data)


@pytest.fixture(scope="module")
def vision(smollm_path: Path, projector: Path) -> Iterator[Engine]:
    config = EngineConfig(
        model=str(smollm_path), mmproj=str(projector), n_seq_max=4, n_ctx_per_seq=1024
    )
    with Engine(config) as engine:
        yield engine


@pytest.fixture(params=ENGINES)
def any_vision(request: pytest.FixtureRequest) -> InferenceEngine:
    """The local engine with the tiny projector, and a llama-server started with it."""
    name = "vision" if request.param == "local" else "remote_engine"
    engine: InferenceEngine = request.getfixturevalue(name)
    return engine


def ask(
    image: ImageInput | None,
    question: str = "What is in this picture?",
    *,
    system: str | None = SYSTEM,
    max_tokens: int = 8,
    logprobs: int | None = None,
) -> ChatRequest:
    content: list[dict[str, object]] = []
    if image is not None:
        content.append({"type": "image", "image": image})
    content.append({"type": "text", "text": question})
    messages = [ChatMessage(role="user", content=content)]
    if system is not None:
        messages.insert(0, ChatMessage(role="system", content=system))
    return ChatRequest(messages=messages, sampling=GREEDY, max_tokens=max_tokens, logprobs=logprobs)


def forget_cache(engine: Engine) -> None:
    """Empty every idle slot, so the next request reads its whole prompt."""
    engine.clear_cache()


def test_engine_reports_the_projector(vision: Engine, projector: Path) -> None:
    assert vision.info.supports_images
    assert vision.info.mmproj == str(projector.resolve())
    assert vision.media_marker and vision.media_marker != "<__media__>"
    assert vision.info.image_max_side is not None and vision.info.image_max_side >= 1024


def test_same_image_same_greedy_answer(vision: Engine) -> None:
    image = noise(1)
    forget_cache(vision)
    first = vision.generate(ask(image))
    forget_cache(vision)
    again = vision.generate(ask(noise(1)))  # equal pixels, a new object
    assert first.text == again.text and first.token_ids == again.token_ids
    assert first.usage == again.usage
    # The same request straight after reuses the cached image too, and still answers the same.
    cached = vision.generate(ask(image))
    assert cached.token_ids == first.token_ids
    assert cached.usage.cached_prompt_tokens > first.usage.prompt_image_tokens


def test_different_images_change_the_answer(any_vision: InferenceEngine) -> None:
    vision = any_vision
    images = [solid((255, 0, 0)), solid((0, 0, 255)), noise(1), noise(2), solid((0, 0, 0))]
    answers = [vision.generate(ask(image, logprobs=5, max_tokens=6)) for image in images]
    first_steps = [
        tuple((t.token_id, round(t.logprob, 3)) for t in a.logprobs[0].top)
        for a in answers
        if a.logprobs
    ]
    assert len(first_steps) == len(images)
    # Every image leads to its own distribution over the first token.
    assert len(set(first_steps)) == len(images), first_steps
    # And to more than one distinct answer (the projector is random: not all may differ).
    assert len({a.token_ids for a in answers}) > 1


def test_usage_counts_image_tokens(vision: Engine) -> None:
    request = ask(noise(3))
    tokens = vision.prompt_tokens(request)
    n_image_positions = sum(1 for t in tokens if t < 0)
    answer = vision.generate(request)
    usage = answer.usage
    assert usage.prompt_image_tokens > 0
    assert usage.prompt_image_tokens == n_image_positions  # one position per embedding here
    assert usage.prompt_tokens == len(tokens)
    assert vision.count_prompt_tokens(request) == usage.prompt_tokens
    text_only = vision.prompt_tokens(ask(None))
    # The image adds its embeddings plus the projector's own wrapping text tokens.
    assert usage.prompt_tokens >= len(text_only) + usage.prompt_image_tokens
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_two_images_in_one_prompt(vision: Engine) -> None:
    one = vision.generate(ask(noise(4)))
    request = ChatRequest(
        messages=[
            ChatMessage(
                role="user",
                content=[
                    {"type": "image", "image": noise(4)},
                    {"type": "text", "text": "and"},
                    {"type": "image", "image": solid((0, 255, 0))},
                    {"type": "text", "text": "Compare them."},
                ],
            )
        ],
        sampling=GREEDY,
        max_tokens=8,
    )
    two = vision.generate(request)
    assert two.usage.prompt_image_tokens == 2 * one.usage.prompt_image_tokens


def test_cached_text_prefix_is_reused_before_a_new_image(vision: Engine) -> None:
    forget_cache(vision)
    first = vision.generate(ask(noise(5)))
    assert first.usage.cached_prompt_tokens == 0
    other = vision.generate(ask(noise(6)))
    prefix = vision.prompt_tokens(ask(noise(6)))
    image_start = next(i for i, t in enumerate(prefix) if t < 0)
    # The system prompt and the text before the image came from the cache, the image did not.
    assert other.usage.cached_prompt_tokens >= image_start - 2
    assert other.usage.cached_prompt_tokens <= image_start
    # Asking something else about the same image reuses the image as well.
    follow_up = vision.generate(ask(noise(6), "Which colours do you see?"))
    assert follow_up.usage.cached_prompt_tokens >= image_start + other.usage.prompt_image_tokens


def test_image_and_text_requests_run_together_without_cross_talk(vision: Engine) -> None:
    image_request = ask(noise(7), max_tokens=16, logprobs=5)
    text_requests = [
        ChatRequest(
            messages=[ChatMessage(role="user", content=f"Count from {n} to {n + 5}.")],
            sampling=GREEDY,
            max_tokens=24,
            logprobs=5,
        )
        for n in (1, 10, 100)
    ]
    forget_cache(vision)
    steps = vision.stats().steps
    alone = [vision.generate(r) for r in [image_request, *text_requests]]
    steps_alone = vision.stats().steps - steps
    forget_cache(vision)

    async def together() -> list[Completion]:
        requests = [*text_requests, image_request]
        return list(await asyncio.gather(*(vision.agenerate(r) for r in requests)))

    steps = vision.stats().steps
    concurrent = asyncio.run(together())
    steps_together = vision.stats().steps - steps
    concurrent = [concurrent[-1], *concurrent[:-1]]
    # Identical, or the same up to a near-tie that batched kernels round the other way; a
    # cross-wired answer parts at once, on a token the request alone would not consider.
    for one, shared in zip(alone, concurrent, strict=True):
        agree_up_to_a_tie(one, shared, TIE_NATS)
    # They shared decode steps (the image was read while the text answers were decoded).
    assert steps_together < steps_alone


def test_streamed_image_answer_matches_generate(any_vision: InferenceEngine) -> None:
    vision = any_vision
    request = ask(noise(8), max_tokens=10)
    whole = vision.generate(request)
    chunks = list(vision.stream(ask(noise(8), max_tokens=10)))
    assert "".join(c.text for c in chunks) == whole.text
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_image_tokens == whole.usage.prompt_image_tokens


def test_raw_completion_places_images_with_the_marker(any_vision: InferenceEngine) -> None:
    vision = any_vision
    marker = vision.media_marker
    assert marker is not None
    request = CompletionRequest(
        prompt=f"Picture: {marker}\nCaption:", images=[noise(9)], sampling=GREEDY, max_tokens=6
    )
    answer = vision.generate(request)
    if isinstance(vision, Engine):  # a server does not say how many embeddings an image took
        assert answer.usage.prompt_image_tokens > 0
    with pytest.raises(InvalidRequestError, match="ends with an image"):
        vision.generate(
            CompletionRequest(prompt=f"Picture: {marker}", images=[noise(9)], max_tokens=4)
        )
    with pytest.raises(InvalidRequestError, match="2 were given"):
        vision.generate(
            CompletionRequest(prompt=f"{marker} x", images=[noise(9), noise(10)], max_tokens=4)
        )
    with pytest.raises(InvalidRequestError, match="token ids"):
        vision.generate(CompletionRequest(prompt=[1, 2, 3], images=[noise(9)], max_tokens=4))


def test_bad_image_requests_fail_typed_and_the_engine_keeps_serving(
    any_vision: InferenceEngine,
) -> None:
    vision = any_vision
    marker = vision.media_marker
    assert marker is not None
    with pytest.raises(InvalidRequestError, match="media marker"):
        vision.generate(ask(noise(1), f"What is {marker}?"))
    with pytest.raises(InvalidRequestError, match="decoded pixels"):
        vision.generate(
            ChatRequest(messages=[{"role": "user", "content": [{"type": "image", "image": b"x"}]}])
        )
    with pytest.raises(InvalidRequestError, match="bytes of pixels"):
        ImageInput(4, 4, b"\0" * 47)
    with pytest.raises(ContextOverflowError):
        vision.generate(ask(noise(1), max_tokens=2000))
    assert vision.stats().running == 0
    assert vision.generate(ask(noise(1), max_tokens=2)).finish_reason in ("stop", "length")


def test_cancelled_image_request_frees_its_sequence(vision: Engine) -> None:
    handle = vision.submit(ask(noise(11), max_tokens=64))
    handle.cancel()
    with pytest.raises(RequestCancelledError):
        handle.result()
    assert vision.stats().running == 0
    assert vision.generate(ask(noise(11), max_tokens=2)).usage.prompt_image_tokens > 0


def _image_end(engine: Engine, request: ChatRequest) -> int:
    """The position after the (one) image of ``request``'s prompt."""
    prompt = engine.prompt_tokens(request)
    return max(i for i, t in enumerate(prompt) if t < 0) + 1


def test_requests_sent_together_read_their_shared_image_once(
    smollm_path: Path, projector: Path
) -> None:
    """Four questions about one picture sent at once: one request evaluates the image, the
    others take its cells and read only their questions, and each answer is the one it gets
    alone (deterministic mode, so the comparison is exact)."""
    config = EngineConfig(
        model=str(smollm_path),
        mmproj=str(projector),
        n_seq_max=4,
        n_ctx_per_seq=1024,
        deterministic=True,
    )
    questions = ["What is in this picture?", "Which colours?", "Is it dark?", "Any text?"]
    with Engine(config) as engine:
        requests = [ask(noise(21), q, max_tokens=12) for q in questions]
        alone = []
        for request in requests:
            engine.clear_cache()
            alone.append(engine.generate(request))
        engine.clear_cache()
        before = engine.stats().shared_prompt_tokens
        handles = [engine.submit(r) for r in requests]
        together = [handle.result() for handle in handles]
        image_end = _image_end(engine, requests[0])
        shared = engine.stats().shared_prompt_tokens - before
        assert idle_and_freed(wait_for(engine, idle_and_freed))
    taken = [c.usage.cached_prompt_tokens for c in together]
    # Every request but the one that read it took the image from another's cells.
    assert sum(t >= image_end for t in taken) == len(requests) - 1, (taken, image_end)
    assert shared == sum(taken)
    assert all(c.usage.prompt_image_tokens > 0 for c in together)
    for a, b in zip(alone, together, strict=True):
        assert a.token_ids == b.token_ids, (a.text, b.text)


def test_a_prompt_with_an_image_is_saved_to_disk_and_restored_after_a_restart(
    smollm_path: Path, projector: Path, tmp_path: Path
) -> None:
    def engine() -> Engine:
        return Engine(
            EngineConfig(
                model=str(smollm_path),
                mmproj=str(projector),
                n_seq_max=2,
                n_ctx_per_seq=1024,
                prompt_cache_dir=str(tmp_path),
                prompt_cache_min_tokens=32,
            )
        )

    request = ask(noise(22), logprobs=3)
    with engine() as first:
        cold = first.generate(request)
        image_end = _image_end(first, request)
    assert cold.usage.cached_prompt_tokens == 0
    assert len(list(tmp_path.glob("*.kvstate"))) == 1
    with engine() as restarted:
        same = restarted.generate(ask(noise(22), logprobs=3))
        other_question = restarted.generate(ask(noise(22), "Which colours?", logprobs=3))
        other_image = restarted.generate(ask(noise(23), logprobs=3))
        assert idle_and_freed(wait_for(restarted, idle_and_freed))
    # The whole prompt but its last chunk (the question after the image and the assistant's
    # header), image included, came from disk.
    assert repeat_kept_all(same)
    agree_up_to_a_tie(cold, same, TIE_NATS)
    assert other_question.usage.cached_prompt_tokens >= image_end
    # Another picture in the same place keeps at most the text before it.
    assert other_image.usage.cached_prompt_tokens <= image_end - cold.usage.prompt_image_tokens


def test_text_engine_refuses_images(engine: Engine) -> None:
    assert not engine.info.supports_images and engine.media_marker is None
    with pytest.raises(ImageInputNotSupportedError, match="mmproj"):
        engine.generate(ask(noise(1)))
    assert engine.generate(ask(None, max_tokens=2)).usage.prompt_image_tokens == 0


def test_projector_files_are_checked(smollm_path: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="not a multimodal projector"):
        Engine(EngineConfig(model=str(smollm_path), mmproj=str(smollm_path)))
    wrong_width = build_tiny_projector(tmp_path / "wide.gguf", n_embd=640)
    with pytest.raises(ModelLoadError, match="projector"):
        Engine(EngineConfig(model=str(smollm_path), mmproj=str(wrong_width)))


def test_projector_with_tokens_the_model_lacks_is_refused(
    smollm_path: Path, tmp_path: Path
) -> None:
    # SmolVLM's projector wraps images in <global-img> and kin, which plain SmolLM2 lacks:
    # libmtmd would emit token id -1 and evaluating it crashes the process.
    smolvlm = build_tiny_projector(tmp_path / "idefics3.gguf", family="idefics3")
    with pytest.raises(ModelLoadError, match="does not fit the model"):
        Engine(EngineConfig(model=str(smollm_path), mmproj=str(smolvlm)))


def test_gemma3_projector_on_gemma(gemma_path: Path, tmp_path: Path) -> None:
    """Gemma 3's family: images between <start_of_image>/<end_of_image>, decoded with
    non-causal attention, on a model with a sliding-window cache."""
    projector = build_tiny_projector(tmp_path / "gemma3.gguf", family="gemma3", n_embd=640)
    config = EngineConfig(
        model=str(gemma_path), mmproj=str(projector), n_seq_max=2, n_ctx_per_seq=512
    )
    with Engine(config) as gemma:
        marker = gemma.media_marker

        def caption(image: ImageInput) -> CompletionRequest:
            return CompletionRequest(
                prompt=f"Here is a picture.\n{marker}\nThe picture above shows",
                images=[image],
                sampling=GREEDY,
                max_tokens=6,
                logprobs=5,
            )

        answers = [
            gemma.generate(caption(image)) for image in (noise(1), noise(1), solid((255, 0, 0)))
        ]
        assert answers[0].token_ids == answers[1].token_ids
        firsts = [tuple(t.token_id for t in a.logprobs[0].top) for a in answers if a.logprobs]
        top_logprobs = [a.logprobs[0].top[0].logprob for a in answers if a.logprobs]
        assert firsts[0] == firsts[1] and top_logprobs[0] == top_logprobs[1]
        assert (firsts[0], top_logprobs[0]) != (firsts[2], top_logprobs[2])
        assert all(
            a.usage.prompt_image_tokens == answers[0].usage.prompt_image_tokens > 0 for a in answers
        )
        # The second identical request reused the cached prefix, image included.
        assert answers[1].usage.cached_prompt_tokens > answers[0].usage.prompt_image_tokens


def test_m_rope_family_counts_cells_not_positions(tmp_path: Path) -> None:
    """Qwen2-VL's family (tiny random pair, tests/builders/tiny_qwen2vl.py): an image takes
    fewer positions than embeddings, so positions, KV cells and cached counts must not mix."""
    model, mmproj = build_tiny_qwen2vl(tmp_path)
    config = EngineConfig(model=str(model), mmproj=str(mmproj), n_seq_max=2, n_ctx_per_seq=512)
    with Engine(config) as qwen:
        image = noise(12, (64, 32))
        request = ask(image, system=None, logprobs=3)
        positions = qwen.prompt_tokens(request)
        n_image_positions = sum(1 for t in positions if t < 0)
        first = qwen.generate(request)
        usage = first.usage
        assert 0 < n_image_positions < usage.prompt_image_tokens  # 8 positions, 32 embeddings
        assert usage.prompt_tokens == len(positions) - n_image_positions + usage.prompt_image_tokens
        assert qwen.count_prompt_tokens(request) == usage.prompt_tokens
        again = qwen.generate(ask(image, system=None, logprobs=3))
        assert again.token_ids == first.token_ids
        # Everything but the prompt's last chunk came from the cache: cells, image included.
        assert repeat_kept_all(again)
        follow_up = qwen.generate(ask(image, "And the colours?", system=None))
        assert follow_up.usage.cached_prompt_tokens > usage.prompt_image_tokens
        other = qwen.generate(ask(noise(13, (64, 32)), system=None, logprobs=3))
        assert first.logprobs and other.logprobs
        assert first.logprobs[0].top != other.logprobs[0].top
