"""The engine flags on a command's parser, and the ``EngineConfig`` its parsed flags make."""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from typing import Any

from ..engine.config import EngineConfig
from ..errors import InvalidRequestError
from .docs import field_docs, flag_help
from .table import ENGINE_FLAGS

__all__ = ["add_engine_flags", "engine_config"]


def add_engine_flags(
    parser: argparse.ArgumentParser, command: str, defaults: Mapping[str, Any] | None = None
) -> None:
    """Add ``command``'s engine flags to ``parser``, their help naming the default where the
    command sets one of its own (``defaults``: field to value)."""
    group = parser.add_argument_group("engine options (EngineConfig; see the server guide)")
    docs = field_docs()
    for flag in ENGINE_FLAGS:
        if command not in flag.commands:
            continue
        text = flag_help(flag, docs).replace("`", "").replace("%", "%%")
        if defaults and flag.field in defaults:
            text += f" (default here: {defaults[flag.field]})"
        options: dict[str, Any] = {"dest": flag.field, "default": argparse.SUPPRESS}
        if flag.read is None:
            options.update(action="store_const", const=flag.const)
        else:
            options.update(type=flag.read, metavar=flag.metavar, choices=flag.choices)
            if flag.many:
                options["action"] = "extend"
        group.add_argument(*flag.names, help=text, **options)


def engine_config(args: argparse.Namespace, command: str, **base: Any) -> EngineConfig:
    """The ``EngineConfig`` of ``command``'s parsed flags over ``base`` (the command's model
    and its own defaults).

    Raises:
        InvalidRequestError: A flag that does nothing without another, or settings the
            engine cannot combine (``EngineConfig``'s checks, naming the flags involved).
    """
    flags = [f for f in ENGINE_FLAGS if command in f.commands and hasattr(args, f.field)]
    given = {f.field: getattr(args, f.field) for f in flags}
    for flag in flags:
        if flag.needs is not None and flag.needs not in given:
            needed = next(f for f in ENGINE_FLAGS if f.field == flag.needs)
            raise InvalidRequestError(f"{flag.flag} does nothing without {needed.flag}")
    try:
        return EngineConfig(**{**base, **given})
    except InvalidRequestError as error:
        named = _flags_named(str(error), given)
        if not named:
            raise
        raise InvalidRequestError(f"{error} (set by {', '.join(named)})") from error


def _flags_named(message: str, given: Mapping[str, Any]) -> list[str]:
    """The flags given whose fields ``message`` names, in the table's order."""
    seen: list[str] = []
    for flag in ENGINE_FLAGS:
        named = flag.field in given and re.search(rf"\b{flag.field}\b", message)
        if named and flag.flag not in seen:
            seen.append(flag.flag)
    return seen
