"""The server's layout holds: one package per API family (``openai``, ``anthropic``,
``responses_api``), no family importing another, the shared plumbing importing no family (only
``app``, which puts them together, does), and no import circle among the server's modules, lazy
imports inside functions included. Read from the source (the AST), so nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

SERVER = Path(__file__).resolve().parents[2] / "llamacpp_integrations" / "server"
PACKAGE = "llamacpp_integrations.server"
FAMILIES = ("openai", "anthropic", "responses_api")
COMPOSITION_ROOT = f"{PACKAGE}.app"


def _module(path: Path) -> str:
    parts = path.relative_to(SERVER).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((PACKAGE, *parts))


def _imports(path: Path) -> set[str]:
    """The absolute names of what ``path`` imports, anywhere in it (a ``from x import y`` counts
    as both ``x`` and ``x.y``, since ``y`` may be a module)."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            names.add(source)
            names |= {f"{source}.{alias.name}" for alias in node.names}
    return names


MODULES = {_module(path): _imports(path) for path in sorted(SERVER.rglob("*.py"))}


def _family(name: str) -> str | None:
    for family in FAMILIES:
        prefix = f"{PACKAGE}.{family}"
        if name == prefix or name.startswith(prefix + "."):
            return family
    return None


def test_the_three_families_are_packages() -> None:
    for family in FAMILIES:
        assert (SERVER / family / "__init__.py").is_file()


def test_no_family_imports_another() -> None:
    crossings = [
        (module, name)
        for module, names in MODULES.items()
        if (family := _family(module)) is not None
        for name in names
        if _family(name) not in (None, family)
    ]
    assert crossings == []


def test_the_plumbing_imports_no_family() -> None:
    crossings = [
        (module, name)
        for module, names in MODULES.items()
        if _family(module) is None and module != COMPOSITION_ROOT
        for name in names
        if _family(name) is not None
    ]
    assert crossings == []


def test_no_import_circle() -> None:
    graph = {
        module: {name for name in names if name in MODULES and name != module}
        for module, names in MODULES.items()
    }
    # A module naming its own package (which Python imports before it anyway) is no circle.
    for module, edges in graph.items():
        graph[module] = {edge for edge in edges if not module.startswith(edge + ".")}
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for edge in sorted(graph[module]):
            if state.get(edge) == 1:
                circles.append([*path[path.index(edge) :], edge])
            elif edge not in state:
                visit(edge, [*path, edge])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert circles == []
