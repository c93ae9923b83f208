"""The flags' help, read from ``EngineConfig``'s field documentation, and the server guide's
table of them (``docs/guides/server.md``, between ``<!--table engine_flags-->`` and
``<!--/table-->``: ``benchmarks/figures.py --check`` fails while it differs, ``make figures``
writes it)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..engine.config import EngineConfig
from . import values
from .table import ENGINE_FLAGS, EngineFlag

__all__ = ["field_docs", "flag_help", "flags_table"]


def field_docs() -> dict[str, str]:
    """Each ``EngineConfig`` field's documentation (its docstring entry, on one line)."""
    docs: dict[str, str] = {}
    field = None
    for line in (EngineConfig.__doc__ or "").partition("Attributes:\n")[2].splitlines():
        entry = re.match(r" {8}(\w+): (.*)", line)
        if entry:
            field = entry.group(1)
            docs[field] = entry.group(2)
        elif field and line.startswith(" " * 12):
            docs[field] += " " + line.strip()
    return docs


def flag_help(flag: EngineFlag, docs: Mapping[str, str] | None = None) -> str:
    """What ``flag`` does, in markdown: its own help, else its field's first sentence."""
    if flag.help is not None:
        return flag.help
    text = (docs if docs is not None else field_docs()).get(flag.field, "")
    first = re.split(r"(?<!e\.g)(?<!i\.e)\.\s+", text, maxsplit=1)[0].rstrip(".")
    return (first + ".").replace("``", "`") if first else ""


def flags_table(flags: Sequence[EngineFlag] = ENGINE_FLAGS) -> str:
    """The server guide's table of engine flags (markdown), as ``docs/guides/server.md``
    holds it between ``<!--table engine_flags-->`` and ``<!--/table-->``."""
    docs = field_docs()
    defaults = {f.name: f.default for f in dataclasses.fields(EngineConfig)}
    lines = [
        "| option | llama-server | `EngineConfig` field (default) | what it does |",
        "|---|---|---|---|",
    ]
    for flag in flags:
        value = flag.metavar or "{" + ",".join(flag.choices or ()) + "}"
        spelled = flag.flag if flag.read is None else f"{flag.flag} {value}"
        names = ", ".join([f"`{spelled}`", *(f"`{alias}`" for alias in flag.names[1:])])
        shown = _default(flag, defaults[flag.field])
        server = flag.llama_server or "none"
        text = flag_help(flag, docs).replace("|", "\\|")
        if flag.needs is not None:
            needed = next(f for f in flags if f.field == flag.needs)
            text += f" Needs `{needed.flag}`."
        lines.append(f"| {names} | {server} | `{flag.field}` ({shown}) | {text} |")
    return "\n".join(lines)


def _default(flag: EngineFlag, value: Any) -> str:
    """A field's default as the table shows it: sizes in binary units, as ``--*-bytes`` take
    them."""
    if flag.read is values.size and isinstance(value, int) and value:
        unit = max(
            (u for u, n in values.UNITS.items() if value % n == 0), key=values.UNITS.__getitem__
        )
        return f"`{value // values.UNITS[unit]}{unit}`"
    return f"`{value!r}`"
