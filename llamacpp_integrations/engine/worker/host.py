"""One loaded model per process, and the worker thread that serves every engine on it.

A ``ModelHost`` owns a copy of a model's weights (``WeightsKey``), the projectors loaded beside
them, and one worker thread. Each ``Engine`` over those weights attaches an ``EngineCore`` of its
own (its contexts, scheduler and queue), whatever its serving settings. So a chat model with a
projector, an embedder, and an LLM asking for a longer context, all over one GGUF, map the file
once, and their steps take turns on one thread.

One thread rather than one per engine: llama.cpp's compute threads spin while they wait, and
two teams of them on the same cores slow each other down many times over. Taking turns costs
nothing when only one engine is busy, and keeps the machine's cores to one decode at a time when
several are.

The loop: run control messages (attach, detach), let every core take its inbox, step every core
that has work, and sleep on the condition all inboxes share when none has.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from ...errors import EngineClosedError
from ...models import read_gguf_info
from ..config import EngineConfig, WeightsKey
from ..native.devices import gpu_free_memory, gpu_offload_supported
from ..native.vision import VisionProjector
from ..native.weights import LoadedModel
from ..sizing import ContextChoice, OffloadChoice, choose_offload, host_available_memory
from .core import EngineCore
from .inbox import Inbox
from .shared_files import SharedByFile
from .stats import StatsBoard
from .time_slice import ask_for_time_slice

__all__ = ["Attachment", "ModelHost", "loaded_draft_weights", "loaded_weights", "open_host"]

log = logging.getLogger("llamacpp_integrations.engine")

T = TypeVar("T")

_LOCK = threading.Lock()  # guards _HOSTS and every host's lease count
_HOSTS: dict[WeightsKey, ModelHost] = {}
_POLL_S = 0.5


@dataclass(frozen=True)
class Attachment:
    """An engine's place on a host: its core's id, stats board and projector."""

    core_id: int
    board: StatsBoard
    vision: VisionProjector | None


def open_host(key: WeightsKey) -> ModelHost:
    """The host of these weights, loading them unless a live host has them already.

    Callers waiting for the same weights share one load; a failed load is retried by the next
    caller. Each call takes a lease that ``ModelHost.release`` gives back.
    """
    with _LOCK:
        host = _HOSTS.get(key)
        if host is None:
            host = _HOSTS[key] = ModelHost(key)
        host.leases += 1
    try:
        host.wait_loaded()
    except BaseException:
        host.release()
        raise
    return host


def loaded_weights() -> list[WeightsKey]:
    """The weights loaded in this process (diagnostics and tests)."""
    with _LOCK:
        return list(_HOSTS)


def loaded_draft_weights() -> list[str]:
    """The draft models loaded beside them, one entry per copy (diagnostics and tests; a
    target drafting for itself loads no copy)."""
    with _LOCK:
        hosts = list(_HOSTS.values())
    return [path for host in hosts for path in host.draft_files()]


class ModelHost:
    """A model's weights and projectors, and the worker thread serving its engines."""

    def __init__(self, key: WeightsKey) -> None:
        self.key = key
        self.leases = 0
        self.cond = threading.Condition()  # shared by the inboxes of every attached engine
        self._controls: deque[Callable[[], None]] = deque()
        self._stopping = False
        self._cores: dict[int, EngineCore] = {}  # worker-owned from here down
        self._projectors = SharedByFile[VisionProjector](VisionProjector.close)
        self._drafts = SharedByFile[LoadedModel](LoadedModel.close)  # draft models' weights
        self._core_ids = itertools.count()
        self._loaded: concurrent.futures.Future[LoadedModel] = concurrent.futures.Future()
        self.offload = OffloadChoice(0, "not loaded yet")
        """How many layers went to the GPU, and why (set before the weights load)."""
        self.thread = threading.Thread(
            target=self._main, name=f"llamacpp-engine:{Path(key.model).name}", daemon=True
        )
        self.thread.start()

    @property
    def model(self) -> LoadedModel:
        return self._loaded.result()

    def wait_loaded(self) -> None:
        self._loaded.result()

    def kv_memory(self) -> tuple[int | None, int]:
        """Free bytes where a new KV cache goes (the GPU when layers were offloaded, else RAM),
        and how many of them the weights may still take: mapped weights sit in the page cache,
        which the kernel counts as available."""
        if self.offload.n_gpu_layers != 0:
            return gpu_free_memory(), 0
        return host_available_memory(), self.model.size_bytes if self.key.use_mmap else 0

    def alive(self) -> bool:
        return self.thread.is_alive()

    def draft_files(self) -> list[str]:
        """Files of the draft models this host holds (a snapshot; the worker owns the table)."""
        return self._drafts.files()

    # ---- callers ---------------------------------------------------------------------------

    def attach(
        self, config: EngineConfig, inbox: Inbox, *, kv: ContextChoice, embedding_pooling: int
    ) -> Attachment:
        """Build a core for ``config`` on the worker (loading its projector and LoRA adapters
        if new)."""

        def build() -> Attachment:
            # Load the adapters now, so a wrong file fails the engine's construction with
            # ModelLoadError instead of failing its first request; the contexts reuse them.
            for adapter in config.lora_adapters:
                self.model.lora(adapter.path)
            vision = None if config.mmproj is None else self._take_projector(config)
            draft = None
            try:
                if config.speculative == "draft":
                    draft = self._take_draft(config)
                core = EngineCore(
                    self.model,
                    config,
                    inbox,
                    kv=kv,
                    embedding_pooling=embedding_pooling,
                    vision=vision,
                    draft_weights=draft,
                )
            except BaseException:
                if vision is not None:
                    self._drop_projector(vision)
                if draft is not None:
                    self._drop_draft(draft)
                raise
            core_id = next(self._core_ids)
            self._cores[core_id] = core
            return Attachment(core_id, core.board, vision)

        return self._on_worker(build)

    def detach(self, attachment: Attachment) -> None:
        """Fail the core's remaining requests, free its contexts and drop it."""

        def drop() -> None:
            core = self._cores.pop(attachment.core_id, None)
            if core is not None:
                core.shutdown()
                if core.vision is not None:
                    self._drop_projector(core.vision)
                if core.draft_weights is not None:
                    self._drop_draft(core.draft_weights)

        if threading.current_thread() is self.thread:
            self._post(drop)  # from a finalizer on the worker: it runs at the next turn
            return
        with contextlib.suppress(EngineClosedError):  # a stopped worker freed it all already
            self._on_worker(drop)

    def release(self) -> None:
        """Give back a lease; the last one stops the worker and frees the weights."""
        with _LOCK:
            self.leases -= 1
            if self.leases > 0:
                return
            if _HOSTS.get(self.key) is self:
                del _HOSTS[self.key]
        with self.cond:
            self._stopping = True
            self.cond.notify_all()
        if threading.current_thread() is not self.thread:
            self.thread.join()

    def _post(self, control: Callable[[], None]) -> None:
        with self.cond:
            self._controls.append(control)
            self.cond.notify_all()

    def _on_worker(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the worker between steps and return its result.

        Raises:
            EngineClosedError: the worker stopped before running it.
        """
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def call() -> None:
            try:
                future.set_result(fn())
            except BaseException as error:
                future.set_exception(error)

        self._post(call)
        while True:
            try:
                return future.result(_POLL_S)
            except concurrent.futures.TimeoutError:
                if not self.alive():
                    raise EngineClosedError("the engine's worker stopped") from None

    # ---- projectors and draft models (worker thread) -------------------------------------

    def _take_projector(self, config: EngineConfig) -> VisionProjector:
        mmproj = config.mmproj
        assert mmproj is not None
        return self._projectors.take(
            mmproj,
            lambda: VisionProjector(
                Path(mmproj),
                self.model,
                n_threads=config.threads,
                use_gpu=self.offload.n_gpu_layers != 0,
            ),
        )

    def _drop_projector(self, projector: VisionProjector) -> None:
        self._projectors.drop(projector)

    def _take_draft(self, config: EngineConfig) -> LoadedModel:
        """The draft model's weights: the host's own when the engine drafts with its own model,
        else one copy per file shared by every engine of this host drafting with it."""
        assert config.speculative_draft_model is not None
        path = config.speculative_draft_model
        if Path(path).resolve() == Path(self.key.model).resolve():
            return self.model
        key = replace(self.key, model=path, n_gpu_layers=self.offload.n_gpu_layers)
        return self._drafts.take(path, lambda: LoadedModel(Path(path), key))

    def _drop_draft(self, weights: LoadedModel) -> None:
        self._drafts.drop(weights)  # the host's own weights are not in the table: a no-op

    # ---- the worker ------------------------------------------------------------------------

    def _main(self) -> None:
        # Before the weights load, so that llama.cpp's threads, started from this one, inherit it.
        ask_for_time_slice()
        try:
            self.offload = self._choose_offload()
            decided = replace(self.key, n_gpu_layers=self.offload.n_gpu_layers)
            model = LoadedModel(Path(self.key.model), decided)
        except BaseException as error:
            with _LOCK:
                if _HOSTS.get(self.key) is self:
                    del _HOSTS[self.key]  # the next caller loads afresh
            self._loaded.set_exception(error)
            return
        # The heap is as big now as it gets at start-up (the frameworks' imports: 200k objects
        # with LangChain and LlamaIndex, about 100 ms to scan), and the caller waits for the
        # load anyway. Scanned once now, CPython's next automatic full pass waits until a
        # quarter as much again has piled up, instead of falling in the first burst of requests.
        gc.collect()
        self._loaded.set_result(model)
        reason = "the engine was closed"
        try:
            self._serve()
        except BaseException as error:
            # A bug or a broken context: the worker's state can no longer be trusted, so every
            # engine on it is closed (failing what runs and waits, with the cause) rather than
            # restarted; the registry builds a fresh engine for the next adapter.
            log.exception("the engine worker failed; its engines are closed")
            reason = (
                f"the engine's worker failed ({type(error).__name__}: {error}); "
                "the engine is closed"
            )
        finally:
            with _LOCK:
                if _HOSTS.get(self.key) is self:
                    del _HOSTS[self.key]
            for core in self._cores.values():
                try:
                    core.shutdown(reason)
                except Exception:  # one core's broken state must not keep the rest open
                    log.exception("closing an engine after its worker stopped failed")
                    core.inbox.close(reason)
            self._cores.clear()
            self._projectors.close_all()
            self._drafts.close_all()
            model.close()

    def _choose_offload(self) -> OffloadChoice:
        requested = self.key.n_gpu_layers
        supported = requested is None and gpu_offload_supported()
        info = read_gguf_info(self.key.model)
        choice = choose_offload(
            requested=requested,
            gpu_offload=supported,
            device_free=gpu_free_memory() if supported else None,
            weights_bytes=info.size_bytes,
            n_layer=info.block_count,
        )
        log.info(
            "%s: n_gpu_layers=%d (%s)",
            Path(self.key.model).name,
            choice.n_gpu_layers,
            choice.reason,
        )
        return choice

    def _serve(self) -> None:
        while True:
            for control in self._wait_for_work():
                control()
            if self._stopping and not self._cores:
                return
            now = time.monotonic()
            cores = list(self._cores.values())
            for core in cores:
                core.take_inbox(now)
            for core in cores:
                core.step()
            if not any(core.busy for core in cores):
                # Idle: one block of a finished answer read again, so new work waits for one
                # block at most and no engine of this worker is slowed while it has work.
                any(core.realign() for core in cores)

    def _wait_for_work(self) -> list[Callable[[], None]]:
        """Control messages to run, once something needs the worker (sleeping until then)."""
        with self.cond:
            while True:
                if self._controls:
                    controls = list(self._controls)
                    self._controls.clear()
                    return controls
                if self._stopping and not self._cores:
                    return []
                cores = self._cores.values()
                if any(core.busy or core.inbox.ready(core.n_free) for core in cores):
                    return []
                if any(core.can_realign for core in cores):
                    return []
                deadlines = [d for c in cores if (d := c.inbox.next_deadline()) is not None]
                timeout = None if not deadlines else min(deadlines) - time.monotonic()
                if timeout is not None and timeout <= 0:
                    return []  # let the inboxes expire what waited too long
                self.cond.wait(timeout)
