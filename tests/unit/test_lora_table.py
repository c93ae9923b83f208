"""LoRA adapters chosen per request, without a model: the engine's table of adapters, what a
request's choice becomes, and how the scheduler keeps adapter sets apart (groups of a step,
cells shared only under the same adapters)."""

from __future__ import annotations

import pickle

import pytest

from llamacpp_integrations.engine import LoraAdapter
from llamacpp_integrations.engine.lora import LoraTable, lora_key
from llamacpp_integrations.engine.prompt_cache.disk_store import SavedFile
from llamacpp_integrations.engine.worker.scheduler import Scheduler
from llamacpp_integrations.engine_flags import values
from llamacpp_integrations.errors import InvalidRequestError, UnknownAdapterError

A, B = ("/m/a.gguf", 1.0), ("/m/b.gguf", 1.0)


def table() -> LoraTable:
    return LoraTable([LoraAdapter("/m/a.gguf", 0.0, "sql"), LoraAdapter("/m/b.gguf")])


def test_adapters_are_known_by_name_file_stem_and_id() -> None:
    infos = table().list()
    assert [(i.id, i.name, i.scale) for i in infos] == [(0, "sql", 0.0), (1, "b", 1.0)]
    twice = LoraTable([LoraAdapter("/m/a.gguf"), LoraAdapter("/m/a.gguf", 0.5)])
    assert [i.name for i in twice.list()] == ["a", "a-1"]  # llama-server loads a file twice too
    with pytest.raises(InvalidRequestError, match="named 'x' already"):
        LoraTable([LoraAdapter("/m/a.gguf", name="x"), LoraAdapter("/m/b.gguf", name="x")])


def test_a_choice_becomes_exactly_the_adapters_named_others_at_zero() -> None:
    loras = table()
    assert loras.key(None) == (B,)  # the default scales
    assert loras.key({}) == ()
    assert loras.key({"sql": 0.5}) == (("/m/a.gguf", 0.5),)
    assert loras.key({1: 1, "sql": 1.0}) == (A, B)  # ids too; sorted by file
    assert loras.key({"sql": 0.0}) == ()  # scale 0 is no adapter
    loras.set_scales({"sql": 1.0})
    assert loras.key(None) == (A,)


def test_an_unknown_adapter_or_a_bad_scale_is_a_typed_error() -> None:
    loras = table()
    with pytest.raises(UnknownAdapterError, match="known: sql, b") as caught:
        loras.key({"chat": 1.0}, request_id="r1")
    assert (caught.value.adapter, caught.value.request_id) == ("chat", "r1")
    assert pickle.loads(pickle.dumps(caught.value)).known == ("sql", "b")
    with pytest.raises(UnknownAdapterError):
        loras.set_scales({5: 1.0})
    assert loras.key(None) == (B,)  # unchanged
    for bad in ({"sql": "high"}, {"sql": float("nan")}, {"sql": True}, ["sql"]):
        with pytest.raises(InvalidRequestError):
            loras.key(bad)  # type: ignore[arg-type]


def test_a_file_given_twice_applies_once_with_its_first_scale() -> None:
    assert lora_key([("/a", 1.0), ("/a", 0.5), ("/b", 0.0)]) == (("/a", 1.0),)


def test_serve_flags_name_adapters() -> None:
    assert values.loras("sql=/m/a.gguf,/m/b.gguf") == [
        LoraAdapter("/m/a.gguf", 1.0, "sql"),
        LoraAdapter("/m/b.gguf", 1.0),
    ]
    assert values.scaled_loras("chat=/m/b.gguf:0") == [LoraAdapter("/m/b.gguf", 0.0, "chat")]
    assert values.loras("/m/x=y.gguf") == [LoraAdapter("/m/x=y.gguf")]  # a path, not a name


def test_a_step_decodes_one_group_per_adapter_set() -> None:
    scheduler = Scheduler(n_seq_max=4, n_batch=64)
    for request_id, lora in (("a", (A,)), ("b", (B,)), ("c", ()), ("d", (A,))):
        scheduler.admit(request_id, [1, 2, 3, ord(request_id)], lora=lora)
    plan = scheduler.plan()
    groups = [[plan.entries[i][0].request_id for i in group] for group in plan.groups]
    assert groups == [["a", "d"], ["b"], ["c"]]
    assert all(len({plan.entries[i][0].lora for i in g}) == 1 for g in plan.groups)


def test_cells_made_under_one_adapter_set_serve_only_that_set() -> None:
    scheduler = Scheduler(n_seq_max=2, n_batch=64)
    first = scheduler.admit("a", [1, 2, 3, 4, 5], lora=(A,))
    scheduler.decoded(scheduler.plan())
    scheduler.release(first, keep_cache=True)
    assert scheduler.lookup([1, 2, 3, 4, 5], (A,))[first.slot.seq_id] == 5
    assert scheduler.lookup([1, 2, 3, 4, 5], (B,))[first.slot.seq_id] == 0
    other = scheduler.admit("b", [1, 2, 3, 4, 5], lora=(B,))
    assert other.n_reused == 0 and other.slot is not first.slot
    assert other.slot.lora == (B,)
    same = scheduler.admit("c", [1, 2, 3, 4, 6], lora=(A,))
    assert same.n_reused == 4 and same.slot is first.slot


def test_saved_prompts_serve_only_the_adapters_the_prompt_cache_keys() -> None:
    scheduler = Scheduler(n_seq_max=1, n_batch=64, disk_lora=(A,))
    saved = SavedFile("saved.kvstate")
    scheduler.index.add(saved, [1, 2, 3, 4, 5])
    assert scheduler.lookup([1, 2, 3, 4, 5], (A,))[saved] == 5
    assert scheduler.lookup([1, 2, 3, 4, 5], ())[saved] == 0
    assert scheduler.lookup([1, 2, 3, 4, 5], (B,))[saved] == 0
