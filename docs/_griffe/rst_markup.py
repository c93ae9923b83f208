"""A griffe extension for the docs build only: reStructuredText markup left in docstrings.

The package's docstrings are Google style with reStructuredText ``literals``, which Markdown
renders as code already. A few also use Sphinx roles (:func:`name`, :class:`Name`), a
``.. code-block:: python`` directive and literal blocks introduced by ``::``, which Markdown would
print as they are. This turns the roles into inline code, and the directive and the literal
blocks into fenced code blocks. The docstrings themselves are not changed.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|mod|data|exc|obj|const):`~?([^`]+)`")
# The directive line, then its body: blank lines and lines indented deeper than the directive.
_DIRECTIVE = re.compile(
    r"^(?P<indent>[ \t]*)\.\. code-block::[ \t]*(?P<lang>\w*)[ \t]*\n"
    r"(?P<body>(?:(?:[ \t]*\n)|(?:(?P=indent)[ \t]+[^\n]*\n?))*)",
    re.MULTILINE,
)

# A paragraph line ending in "::", a blank line, then the literal block (indented deeper).
_LITERAL = re.compile(
    r"^(?P<indent>[ \t]*)(?P<intro>[^\n]*?\S)::[ \t]*\n[ \t]*\n"
    r"(?P<body>(?:(?:[ \t]*\n)|(?:(?P=indent)[ \t]+[^\n]*\n?))*)",
    re.MULTILINE,
)


def _fence(indent: str, lang: str, body: str) -> str:
    code = textwrap.dedent(body).strip("\n").splitlines()
    lines = [f"{indent}```{lang}", *(f"{indent}{line}" if line else "" for line in code)]
    return "\n".join([*lines, f"{indent}```", ""]) + "\n"


def _fenced(match: re.Match[str]) -> str:
    return _fence(match["indent"], match["lang"] or "python", match["body"])


def _literal(match: re.Match[str]) -> str:
    intro = match["intro"]
    lang = "python" if "example" in intro.lower() else "text"
    return f"{match['indent']}{intro}:\n\n" + _fence(match["indent"], lang, match["body"])


class RstMarkup(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        docstring = obj.docstring
        if docstring is None:
            return
        value = _ROLE.sub(r"`\1`", docstring.value)
        value = _DIRECTIVE.sub(_fenced, value)
        docstring.value = _LITERAL.sub(_literal, value)
