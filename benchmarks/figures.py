"""Every measured figure in README.md and docs/ comes from ``benchmarks/results/*.json``.

A page ties a figure to its results file with a comment right after it::

    0.28x<!--fig serve: levels[server=ours,mode=closed,load=16].ttft_ms.p99 / levels[...]...-->

and a table built wholly from one results file sits between ``<!--table NAME-->`` and
``<!--/table-->``, rendered by the function NAME in ``figure_tables.py``. A number with a
measurement unit (``ms``, ``tok/s``, ``MB``, ``x``...) that carries neither a ``<!--fig ...-->``
marker nor ``<!--given-->`` (a setting or an input the text chooses, not a measurement) is an
unsourced figure. ``docs/benchmarks.md`` is the text ``report.py`` renders. Every results file
says where, when and on which commit it was measured, and with which settings on every side.

    python benchmarks/figures.py --check            # exit 1 with file:line: problem lines
    python benchmarks/figures.py --write            # rewrite figures and blocks from results
    python benchmarks/figures.py --check --page docs/index.md

Stdlib only: ``make test`` and the mkdocs hook (docs/_hooks/check_figures.py) run it.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
# Copies of the example notebooks written by their execution: generated, not written prose.
SKIPPED_DIRS = ("docs/notebooks",)
# Pages written whole by a renderer: compared with what it renders now.
GENERATED_PAGES = {"docs/benchmarks.md": "report"}
# What a results file must say about where it was measured.
MACHINE_FIELDS = ("date", "cpu", "cores", "commit")
# Files that are not measurements of this project (cited figures carry their own sources).
CITED = "cited"

# The units a measured figure is written with (spaced from its number or not; \u00d7 is the
# multiplication sign). Seconds only spaced: "400s" is a plural (HTTP 400s), "0.2 s" a time.
UNITS = r"tok/s|tokens/s|texts/s|req/s|seconds|minutes|ms|µs|MiB|MB|GiB|GB| s|%|\u00d7"
NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
# A number with a unit, as the lint looks for them: "0.28x" (x only unspaced), "12 ms", "3" and a
# multiplication sign.
UNIT_FIGURE = re.compile(rf"(?<![\w.,/])(?P<num>{NUMBER})(?:x|\s?(?:{UNITS}))(?![\w/])", re.UNICODE)
# What may stand between a figure and its marker (bold, a closing bracket).
TRAILER = re.compile(r"[*_)\]]*")
FIG_MARKER = re.compile(r"<!--\s*fig\s+(?P<stem>[\w.-]+)\s*:\s*(?P<expr>.*?)\s*-->")
GIVEN_MARKER = re.compile(r"<!--\s*given\s*-->")
COMMENT = re.compile(r"<!--.*?-->")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
# The number written before a marker: digits, optional commas and decimals, then a unit.
WRITTEN = re.compile(
    rf"(?P<num>(?:(?<![\w.])-)?(?<![\w.,])(?:{NUMBER}))(?P<unit>\s?[^\s\d<>]{{0,12}})$"
)
FENCE = re.compile(r"^\s*(```+|~~~+)")
TABLE_OPEN = re.compile(r"^\s*<!--\s*table\s+(?P<name>\w+)\s*-->\s*$")
TABLE_CLOSE = re.compile(r"^\s*<!--\s*/table\s*-->\s*$")
FUNCTIONS = {"min", "max", "mean"}


class FigureError(ValueError):
    """A marker that cannot be evaluated: a bad path, an ambiguous selection, a bad expression."""


@dataclass
class Problem:
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass
class Results:
    """The results files, read once each."""

    directory: Path = RESULTS_DIR
    _cache: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, stem: str) -> Any:
        if stem not in self._cache:
            path = self.directory / f"{stem}.json"
            if not path.is_file():
                raise FigureError(f"no results file benchmarks/results/{stem}.json")
            self._cache[stem] = json.loads(path.read_text(encoding="utf-8"))
        return self._cache[stem]


# --- paths and expressions -------------------------------------------------------------------

PATH_STEP = re.compile(r"\.(?P<key>[\w-]+)|\[(?P<sub>[^\]]*)\]")
IDENT = re.compile(r"[A-Za-z_]\w*")
NUMERIC = re.compile(r"\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?")


def _as_number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _matches(item: Any, conditions: list[tuple[str, str]]) -> bool:
    if not isinstance(item, dict):
        return False
    for key, wanted in conditions:
        if key not in item:
            return False
        value = item[key]
        number = _as_number(wanted)
        if isinstance(value, bool):
            if str(value).lower() != wanted.lower():
                return False
        elif isinstance(value, int | float) and number is not None:
            if float(value) != number:
                return False
        elif str(value) != wanted:
            return False
    return True


def _step(value: Any, step: str, path: str) -> Any:
    """One ``.key``, ``[N]``, ``[k=v,...]`` or ``["key"]`` step."""
    if step.startswith("."):
        key = step[1:]
        if not isinstance(value, dict) or key not in value:
            raise FigureError(f"{path}: no key {key!r}")
        return value[key]
    inner = step[1:-1].strip()
    if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "\"'":
        key = inner[1:-1]
        if not isinstance(value, dict) or key not in value:
            raise FigureError(f"{path}: no key {key!r}")
        return value[key]
    if re.fullmatch(r"-?\d+", inner):
        if not isinstance(value, list):
            raise FigureError(f"{path}: [{inner}] on something that is not a list")
        try:
            return value[int(inner)]
        except IndexError:
            raise FigureError(f"{path}: index {inner} past the end") from None
    if "=" in inner:
        if not isinstance(value, list):
            raise FigureError(f"{path}: [{inner}] on something that is not a list")
        conditions = []
        for part in inner.split(","):
            key, _, wanted = part.partition("=")
            conditions.append((key.strip(), wanted.strip()))
        found = [item for item in value if _matches(item, conditions)]
        if len(found) != 1:
            raise FigureError(f"{path}: [{inner}] matches {len(found)} items, not one")
        return found[0]
    raise FigureError(f"{path}: cannot read step {step!r}")


def resolve(document: Any, path: str) -> Any:
    """The value at ``path`` (a list of values past a ``[*]``)."""
    first = IDENT.match(path)
    if first is None:
        raise FigureError(f"{path}: a path starts with a key")
    steps = ["." + first.group()]
    rest = path[first.end() :]
    position = 0
    while position < len(rest):
        match = PATH_STEP.match(rest, position)
        if match is None:
            raise FigureError(f"{path}: cannot read {rest[position:]!r}")
        steps.append(match.group())
        position = match.end()
    values: list[Any] = [document]
    spread = False
    for step in steps:
        if step == "[*]":
            expanded: list[Any] = []
            for value in values:
                if not isinstance(value, list):
                    raise FigureError(f"{path}: [*] on something that is not a list")
                expanded.extend(value)
            values, spread = expanded, True
        else:
            values = [_step(value, step, path) for value in values]
    return values if spread else values[0]


def _split_paths(expr: str) -> tuple[str, list[str]]:
    """The expression with each path replaced by a name ``_pN``, and the paths."""
    out: list[str] = []
    paths: list[str] = []
    position = 0
    while position < len(expr):
        char = expr[position]
        number = NUMERIC.match(expr, position)
        if char.isdigit() or (char == "." and number):
            assert number is not None
            out.append(number.group())
            position = number.end()
            continue
        ident = IDENT.match(expr, position)
        if ident is None:
            out.append(char)
            position += 1
            continue
        after = expr[ident.end() :].lstrip()
        if ident.group() in FUNCTIONS and after.startswith("("):
            out.append(ident.group())
            position = ident.end()
            continue
        end = ident.end()
        while True:
            step = PATH_STEP.match(expr, end)
            if step is None:
                break
            end = step.end()
        out.append(f"_p{len(paths)}")
        paths.append(expr[position:end])
        position = end
    return "".join(out), paths


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FigureError(f"{where} is {value!r}, not a number")
    return float(value)


def evaluate(document: Any, expr: str) -> float:
    """EXPR (paths, ``+ - * /``, parentheses, numbers, min/max/mean) over one results file."""
    source, paths = _split_paths(expr)
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError:
        raise FigureError(f"cannot parse {expr!r}") from None
    values = {f"_p{i}": resolve(document, path) for i, path in enumerate(paths)}
    names = {f"_p{i}": path for i, path in enumerate(paths)}

    def scalar(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            if isinstance(node.value, bool):
                raise FigureError(f"{expr!r}: booleans are not numbers")
            return float(node.value)
        if isinstance(node, ast.Name) and node.id in values:
            return _number(values[node.id], names[node.id])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            operand = scalar(node.operand)
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp):
            left, right = scalar(node.left), scalar(node.right)
            if isinstance(node.op, ast.Add):
                return left + right
            if isinstance(node.op, ast.Sub):
                return left - right
            if isinstance(node.op, ast.Mult):
                return left * right
            if isinstance(node.op, ast.Div):
                if right == 0:
                    raise FigureError(f"{expr!r}: division by zero")
                return left / right
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in FUNCTIONS
            and not node.keywords
        ):
            items: list[float] = []
            for arg in node.args:
                if isinstance(arg, ast.Name) and isinstance(values.get(arg.id), list):
                    items += [_number(v, names[arg.id]) for v in values[arg.id]]
                else:
                    items.append(scalar(arg))
            if not items:
                raise FigureError(f"{expr!r}: {node.func.id}() of nothing")
            if node.func.id == "min":
                return min(items)
            if node.func.id == "max":
                return max(items)
            return sum(items) / len(items)
        raise FigureError(f"{expr!r}: only paths, numbers, + - * /, min, max, mean")

    return scalar(tree.body)


# --- written numbers -------------------------------------------------------------------------


def decimals(written: str) -> int:
    return len(written.split(".", 1)[1]) if "." in written else 0


def render_number(value: float, written: str) -> str:
    """``value`` in the style of ``written``: as many decimals, commas if it had them."""
    places = decimals(written)
    text = f"{value:,.{places}f}" if "," in written else f"{value:.{places}f}"
    if float(text.replace(",", "")) == 0:
        text = text.lstrip("-")
    return text


def agrees(value: float, written: str) -> bool:
    return render_number(value, written).replace(",", "") == written.replace(",", "")


# --- scanning pages --------------------------------------------------------------------------


@dataclass
class Line:
    number: int
    text: str
    # The text with code spans blanked (same length): where markers and figures are looked for.
    prose: str


@dataclass
class Block:
    name: str
    open_line: int  # 1-based line of <!--table NAME-->
    close_line: int  # 1-based line of <!--/table-->
    body: str


def _blank(match: re.Match[str]) -> str:
    return " " * len(match.group())


def scan(text: str) -> tuple[list[Line], list[Block], list[Problem]]:
    """The prose lines (outside fenced code and generated blocks) and the generated blocks."""
    lines: list[Line] = []
    blocks: list[Block] = []
    problems: list[Problem] = []
    fence: str | None = None
    block: tuple[str, int, list[str]] | None = None
    for number, raw in enumerate(text.split("\n"), start=1):
        if block is not None:
            if TABLE_CLOSE.match(raw):
                name, start, body = block
                blocks.append(Block(name, start, number, "\n".join(body)))
                block = None
            else:
                block[2].append(raw)
            continue
        fenced = FENCE.match(raw)
        if fence is not None:
            if fenced and fenced.group(1)[0] == fence[0] and len(fenced.group(1)) >= len(fence):
                fence = None
            continue
        if fenced:
            fence = fenced.group(1)
            continue
        opened = TABLE_OPEN.match(raw)
        if opened:
            block = (opened.group("name"), number, [])
            continue
        if TABLE_CLOSE.match(raw):
            problems.append(Problem("", number, "<!--/table--> without <!--table NAME-->"))
            continue
        lines.append(Line(number, raw, INLINE_CODE.sub(_blank, raw)))
    if block is not None:
        problems.append(Problem("", block[1], f"<!--table {block[0]}--> is never closed"))
    return lines, blocks, problems


@dataclass
class Figure:
    line: int
    start: int  # where the written number starts in the line
    end: int  # where it ends
    written: str
    stem: str
    expr: str


def figures_in(line: Line) -> Iterator[Figure | Problem]:
    for marker in FIG_MARKER.finditer(line.prose):
        before = COMMENT.sub(_blank, line.prose[: marker.start()]).rstrip(" ")
        trailer = re.search(r"[*_)\]]*$", before)
        head = before[: trailer.start()] if trailer else before
        match = WRITTEN.search(head)
        if match is None:
            yield Problem("", line.number, f"no number before <!--fig {marker.group('stem')}:")
            continue
        yield Figure(
            line.number,
            match.start("num"),
            match.end("num"),
            match.group("num"),
            marker.group("stem"),
            marker.group("expr"),
        )


def unsourced(line: Line) -> Iterator[Problem]:
    """Numbers with a unit that no marker follows."""
    prose = line.prose
    masked = COMMENT.sub(_blank, prose)
    for match in UNIT_FIGURE.finditer(masked):
        rest = prose[match.end() :]
        rest = rest[TRAILER.match(rest).end() :]  # type: ignore[union-attr]
        if FIG_MARKER.match(rest) or GIVEN_MARKER.match(rest):
            continue
        yield Problem(
            "",
            line.number,
            f"unsourced figure {match.group().strip()!r}: mark it <!--fig STEM: PATH--> "
            "or <!--given-->",
        )


# --- checking and writing a page -------------------------------------------------------------


def _tables() -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import figure_tables

    return figure_tables


def render_table(name: str, results: Results) -> str:
    tables = _tables()
    render: Callable[[Results], str] | None = getattr(tables, name, None)
    if name.startswith("_") or render is None:
        raise FigureError(f"no table {name!r} in benchmarks/figure_tables.py")
    return render(results).rstrip("\n")


def _rendered_page(relative: str) -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    module = __import__(GENERATED_PAGES[relative])
    text: str = module.render(plot=False)
    return text


def process(
    relative: str, text: str, results: Results, write: bool = False
) -> tuple[str, list[Problem]]:
    """Check one page (or rewrite it): the new text and the problems left."""
    if relative in GENERATED_PAGES:
        try:
            rendered = _rendered_page(relative)
        except Exception as error:  # a renderer's failure is the page's problem
            return text, [Problem(relative, 1, f"cannot render: {error!r}")]
        if write:
            return rendered, []
        if rendered != text:
            return text, [
                Problem(
                    relative,
                    _first_difference(text, rendered),
                    f"differs from what {GENERATED_PAGES[relative]}.py renders now "
                    "(make figures rewrites it)",
                )
            ]
        return text, []
    lines, blocks, problems = scan(text)
    for problem in problems:
        problem.path = relative
    source = text.split("\n")
    for line in lines:
        rewrites: list[tuple[int, int, str]] = []
        for found in figures_in(line):
            if isinstance(found, Problem):
                found.path = relative
                problems.append(found)
                continue
            try:
                value = evaluate(results[found.stem], found.expr)
            except FigureError as error:
                problems.append(Problem(relative, line.number, str(error)))
                continue
            if agrees(value, found.written):
                continue
            if write:
                rewrites.append((found.start, found.end, render_number(value, found.written)))
                continue
            problems.append(
                Problem(
                    relative,
                    line.number,
                    f"{found.written} differs from {found.stem}: {found.expr} = "
                    f"{render_number(value, found.written)}",
                )
            )
        current = source[line.number - 1]
        for start, end, new in reversed(rewrites):  # right to left: earlier offsets hold
            current = current[:start] + new + current[end:]
        source[line.number - 1] = current
        for problem in unsourced(line):
            problem.path = relative
            problems.append(problem)
    for block in reversed(blocks):
        try:
            rendered = render_table(block.name, results)
        except FigureError as error:
            problems.append(Problem(relative, block.open_line, str(error)))
            continue
        if rendered == block.body:
            continue
        if write:
            source[block.open_line : block.close_line - 1] = rendered.split("\n")
        else:
            problems.append(
                Problem(
                    relative,
                    block.open_line,
                    f"table {block.name} differs from what figure_tables.{block.name} renders "
                    "now (make figures rewrites it)",
                )
            )
    return "\n".join(source), problems


def _first_difference(old: str, new: str) -> int:
    for number, (a, b) in enumerate(zip(old.split("\n"), new.split("\n"), strict=False), 1):
        if a != b:
            return number
    return min(len(old.split("\n")), len(new.split("\n"))) + 1


# --- results files ---------------------------------------------------------------------------


def check_results(directory: Path = RESULTS_DIR) -> list[Problem]:
    """Every results file says when, where, on which commit, and with which settings."""
    problems = []
    for path in sorted(directory.glob("*.json")):
        relative = _relative(path)
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            problems.append(Problem(relative, error.lineno, f"not JSON: {error.msg}"))
            continue
        if path.stem == CITED:
            problems += _check_cited(relative, document)
            continue
        machine = document.get("machine")
        if not isinstance(machine, dict):
            problems.append(Problem(relative, 1, "no machine block (date, cpu, cores, commit)"))
        else:
            missing = [key for key in MACHINE_FIELDS if machine.get(key) in (None, "")]
            if missing:
                problems.append(Problem(relative, 1, f"machine lacks {', '.join(missing)}"))
        if not isinstance(document.get("settings"), dict) or not document["settings"]:
            problems.append(Problem(relative, 1, "no settings"))
    return problems


def _check_cited(relative: str, document: Any) -> list[Problem]:
    problems = []
    for name, entry in document.items():
        if name in ("benchmark", "note"):
            continue
        if not isinstance(entry, dict) or not {"value", "source", "date"} <= set(entry):
            problems.append(Problem(relative, 1, f"cited figure {name!r} lacks value/source/date"))
    return problems


# --- the pages -------------------------------------------------------------------------------


def _relative(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def pages(root: Path = ROOT) -> list[Path]:
    found = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    return [
        path
        for path in found
        if path.is_file()
        and not any(path.relative_to(root).as_posix().startswith(d + "/") for d in SKIPPED_DIRS)
    ]


def run(selected: list[Path] | None = None, write: bool = False) -> list[Problem]:
    results = Results()
    problems: list[Problem] = [] if selected else check_results()
    for path in selected or pages():
        relative = _relative(path)
        text = path.read_text(encoding="utf-8")
        new, found = process(relative, text, results, write=write)
        if write and new != text:
            path.write_text(new, encoding="utf-8")
            print(f"rewrote {relative}")
        problems += found
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="report drift (the default)")
    mode.add_argument("--write", action="store_true", help="rewrite figures and tables")
    parser.add_argument("--page", action="append", type=Path, help="only this page (repeatable)")
    args = parser.parse_args(argv)
    selected = [p if p.is_absolute() else Path.cwd() / p for p in args.page or []]
    problems = run(selected or None, write=args.write)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problem(s) with the docs' figures", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
