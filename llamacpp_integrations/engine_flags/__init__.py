"""The engine's command-line options: one table that ``serve``, ``chat`` and ``doctor`` take
their engine flags from and the server guide's option table is rendered from.

Each ``EngineFlag`` sets one ``EngineConfig`` field, names llama-server's flag for the same
setting where it has one (as release b11434 spells it), and spells its own flag the same way
where the meaning is the same. Its help is the field's documentation (the first sentence of
its entry in ``EngineConfig``'s docstring) unless the flag says it differently.

A flag left out is absent from the parsed namespace (``argparse.SUPPRESS``), so ``engine_config``
knows what was given: the command's own defaults fill the rest, a flag that would do nothing
without another (a speculation setting without ``--spec-type``) is refused, and
``EngineConfig`` refuses the combinations the engine cannot run; all of it before any model
loads, as ``InvalidRequestError``. Values are read at parse time (``--tensor-split 3,1``,
``--n-gpu-layers all``, sizes as ``2G``): a malformed one is argparse's usage error.

Pure: imports nothing native (the docs build and the unit tests render the table).
"""

from __future__ import annotations

from .docs import field_docs, flag_help, flags_table
from .parsing import add_engine_flags, engine_config
from .table import COMMANDS, ENGINE_FLAGS, EngineFlag

__all__ = [
    "COMMANDS",
    "ENGINE_FLAGS",
    "EngineFlag",
    "add_engine_flags",
    "engine_config",
    "field_docs",
    "flag_help",
    "flags_table",
]
