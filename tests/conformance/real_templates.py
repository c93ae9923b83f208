"""The real chat templates of about 70 model families, read from llama.cpp's sources.

llama.cpp keeps the published templates of the families it supports in ``models/templates/``;
llama-cpp-python's sdist vendors that tree. The templates are other projects' files, so the
repository holds no copies: the first use downloads the installed version's sdist (pip's cache
keeps it) and unpacks just that folder under ``.cache/llama-templates/<version>/``.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_MEMBER_DIR = "/vendor/llama.cpp/models/templates/"


def llama_cpp_version() -> str:
    return importlib.metadata.version("llama-cpp-python")


def template_dir() -> Path:
    """The folder of ``*.jinja`` templates for the installed llama-cpp-python (unpacked once)."""
    version = llama_cpp_version()
    target = ROOT / ".cache" / "llama-templates" / version
    if any(target.glob("*.jinja")):
        return target
    with tempfile.TemporaryDirectory(prefix="llama-sdist-") as scratch:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:",
             "--no-deps", "-d", scratch, f"llama-cpp-python=={version}"],
            check=True,
        )  # fmt: skip
        (sdist,) = Path(scratch).glob("llama_cpp_python-*.tar.gz")
        # one partial folder per process: parallel test workers may unpack at the same time
        partial = target.with_name(f"{version}.{os.getpid()}.partial")
        partial.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist) as archive:
            for member in archive:
                name = member.name
                if member.isfile() and _MEMBER_DIR in name and name.endswith(".jinja"):
                    source = archive.extractfile(member)
                    assert source is not None
                    (partial / Path(name).name).write_bytes(source.read())
        try:
            partial.replace(target)
        except OSError:  # another worker's folder landed first: the same files
            shutil.rmtree(partial, ignore_errors=True)
    return target


def real_templates() -> dict[str, str]:
    """Every real template, by family name (the file name without ``.jinja``), sorted."""
    return {
        path.stem: path.read_text(encoding="utf-8")
        for path in sorted(template_dir().glob("*.jinja"))
    }


if __name__ == "__main__":
    print(template_dir())
