"""The llama-server builds this package was tested against, in one place.

A llama-server names its build in ``/props`` ``build_info`` (``b<number>-<commit>``). Its native
API (``/completion`` fields, the ``grammar_triggers`` encoding, the stream's last event) changes
between builds without notice, so a server whose build is not listed here is refused with
``UntestedServerError`` unless the caller passes ``allow_untested_build=True``.
"""

from __future__ import annotations

from ..errors import UntestedServerError

__all__ = ["TESTED_BUILDS", "check_build"]

TESTED_BUILDS: frozenset[str] = frozenset(
    {
        # llama.cpp vendored by llama-cpp-python 0.3.36, as `make llama-server` builds it
        # (benchmarks/llama_tools names the build after the llama-cpp-python release).
        "b0-llama-cpp-python-0.3.36",
    }
)


def check_build(build_info: object, url: str, *, allow_untested: bool) -> None:
    """Raise ``UntestedServerError`` for a build not in ``TESTED_BUILDS`` (unless allowed)."""
    if allow_untested or build_info in TESTED_BUILDS:
        return
    tested = ", ".join(sorted(TESTED_BUILDS))
    raise UntestedServerError(
        f"{url} runs llama-server build {build_info!r}, which this package was not tested "
        f"against (tested: {tested}); pass allow_untested_build=True to use it anyway"
    )
