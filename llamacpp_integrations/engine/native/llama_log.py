"""Route llama.cpp's own log lines into Python logging (quiet unless the user asks for them)."""

from __future__ import annotations

import ctypes
import logging
import threading

import llama_cpp

_logger = logging.getLogger("llamacpp_integrations.llama_cpp")

# ggml_log_level (ggml.h): 0 none, 1 debug, 2 info, 3 warn, 4 error, 5 continues the last line.
_LEVELS = {
    0: logging.INFO,
    1: logging.DEBUG,
    2: logging.INFO,
    3: logging.WARNING,
    4: logging.ERROR,
}


# What llama.cpp logs, as errors and a warning, for a decode its abort callback stopped: only
# the engine's stall watch asks for that (``interrupt.py``), on purpose, and the worker decodes
# the batch again, so these lines are debug lines. ggml's status 1 is GGML_STATUS_ABORTED; the
# lines after it, on the same thread, up to the decode's return code, belong to the same stop.
_ABORTED = ("failed with error 1", "compute status: 1")
_AFTER_ABORT = ("removing memory module entries", "failed to decode, ret = 2")


class _LogRouter:
    """One callback for the process (llama.cpp's log hook is global); kept alive by this object."""

    def __init__(self) -> None:
        self._stopping = threading.local()  # per thread: the decode under way was stopped
        self._lock = threading.Lock()
        self._installed = False
        self._mtmd_installed = False
        self._previous_level = logging.DEBUG
        # ctypes must keep a reference to the C callback for as long as llama.cpp may call it.
        self._callback = llama_cpp.llama_log_callback(self._on_log)

    def _on_log(self, level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
        log_level = self._previous_level if level == 5 else _LEVELS.get(level, logging.DEBUG)
        line = text.decode("utf-8", errors="replace").rstrip("\n")
        if log_level >= logging.WARNING and self._stopped(line):
            log_level = logging.DEBUG
        self._previous_level = log_level
        if _logger.isEnabledFor(log_level):
            _logger.log(log_level, "%s", line)

    def _stopped(self, line: str) -> bool:
        """Whether ``line`` tells of a decode stopped on purpose (see ``_ABORTED``)."""
        if any(part in line for part in _ABORTED):
            self._stopping.now = True
            return True
        if getattr(self._stopping, "now", False) and any(p in line for p in _AFTER_ABORT):
            if "ret = " in line:  # the decode's return: the stop's last line
                self._stopping.now = False
            return True
        return False

    def install(self) -> None:
        with self._lock:
            if not self._installed:
                llama_cpp.llama_log_set(self._callback, ctypes.c_void_p(0))
                self._installed = True

    def install_mtmd(self) -> None:
        """Also route libmtmd's lines (it prints to stderr by default, one line per image)."""
        from llama_cpp import mtmd_cpp  # loads libmtmd: only for engines with a projector

        with self._lock:
            if not self._mtmd_installed:
                mtmd_cpp.mtmd_log_set(self._callback, ctypes.c_void_p(0))
                mtmd_cpp.mtmd_helper_log_set(self._callback, ctypes.c_void_p(0))
                self._mtmd_installed = True


ROUTER = _LogRouter()
