"""The package as published: ``python -m build`` makes an sdist and a wheel that ``twine check``
passes, and the wheel with the ``langchain`` extra installs into a fresh venv from wheels alone
(nothing compiled: no llama.cpp) and replays a committed cassette there.

The sources are copied out first, so the build writes nothing into the checkout. The fresh venv
has no pip of its own: this environment's pip installs into it (``--python``), from the
configured index and pip's cache, without byte-compiling.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import llamacpp_integrations

ROOT = Path(__file__).resolve().parents[2]
# What setuptools puts in the sdist: the package, the files pyproject.toml names, and itself.
SOURCES = ["pyproject.toml", "README.md", "LICENSE", "llamacpp_integrations"]
CASSETTE = (
    ROOT
    / "tests/cassettes/unit/test_guide_testing"
    / "test_the_agent_calls_multiply_and_answers.llamacpp.jsonl"
)
SCRIPT = ROOT / "tests/builders/without_local.py"

for tool in ("build", "twine", "venv"):
    if importlib.util.find_spec(tool) is None:
        pytest.skip(
            f"{tool} is not installed: the packaging test needs the test extra's build and twine",
            allow_module_level=True,
        )


def _run(*command: str | Path, cwd: Path) -> str:
    done = subprocess.run(
        [str(part) for part in command],
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
        cwd=cwd,
    )
    assert done.returncode == 0, f"{command}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel, built from a copy of the sources."""
    where = tmp_path_factory.mktemp("packaging")
    source = where / "source"
    for name in SOURCES:
        origin = ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(origin, source / name)
    out = where / "dist"
    _run(sys.executable, "-m", "build", "--outdir", out, source, cwd=where)
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return {"wheel": wheel, "sdist": sdist, "where": where}


def test_build_makes_an_sdist_and_a_wheel_that_twine_passes(dist: dict[str, Path]) -> None:
    output = _run(
        sys.executable,
        "-m",
        "twine",
        "check",
        "--strict",
        dist["sdist"],
        dist["wheel"],
        cwd=dist["where"],
    )
    assert output.count("PASSED") == 2, output
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(wheel.read(name).decode())
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in wheel.namelist())
    assert metadata["Version"] == llamacpp_integrations.__version__
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("Project-URL") and metadata.get_all("Classifier")
    # llama-cpp-python only with the local extra: the core compiles nothing.
    llama = [r for r in metadata.get_all("Requires-Dist") or [] if "llama-cpp-python" in r]
    assert llama and all('extra == "local"' in r for r in llama), llama
    with tarfile.open(dist["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {"LICENSE", "README.md", "pyproject.toml"} <= names


def test_the_wheel_installs_without_compiling_and_replays_a_cassette(
    dist: dict[str, Path],
) -> None:
    venv = dist["where"] / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=dist["where"])
    python = venv / "bin" / "python"
    # --only-binary: a dependency with no wheel fails the install instead of compiling.
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--quiet",
        "--no-compile",
        "--disable-pip-version-check",
        "--only-binary",
        ":all:",
        f"{dist['wheel']}[langchain]",
        cwd=dist["where"],
    )
    show = "import json, llamacpp_integrations as p; print(json.dumps(p.__file__))"
    where = json.loads(_run(python, "-c", show, cwd=dist["where"]))
    assert Path(where).is_relative_to(venv), where  # the installed wheel, not the checkout
    result = json.loads(_run(python, SCRIPT, CASSETTE, cwd=dist["where"]).splitlines()[-1])
    assert result["llama_cpp_importable"] is False
    assert result["tool_calls"] == [{"name": "multiply", "args": {"a": 6, "b": 7}}]
    assert result["answer"]
    for name, error in result["errors"].items():
        assert (error["type"], error["extra"]) == ("MissingDependencyError", "local"), name
