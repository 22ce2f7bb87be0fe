"""The docs render as written: the docstrings mkdocstrings shows on the API page are Markdown (no Sphinx roles),
table cells hold no ``|`` inside a code span, and code blocks scroll instead of being cut at the column's edge.

Cheap text checks over the sources (no site build): each one names the file and line to change.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# reST markup that Markdown shows as typed: roles (``:meth:`x```), directives, ``text <url>`_`` links, ``Example::``
SPHINX_ROLE = re.compile(r":(?:meth|attr|func|class|exc|mod|data|obj|ref|py:\w+):`")
REST_MARKUP = re.compile(r"^\s*\.\. \w+::|`[^`]+`__?(?!\w)|\w::\s*$", re.MULTILINE)
# a Markdown code span: a run of backticks, its content, the same run again
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")


def test_no_sphinx_roles_in_any_docstring_or_comment_of_the_package() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sorted((ROOT / "src" / "distlock").rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if SPHINX_ROLE.search(line)
    ]
    assert not found, "Sphinx roles show as typed on the docs site; write ``name`` instead:\n" + "\n".join(found)


def _documented() -> Iterator[tuple[str, object]]:
    """Every object docs/api.md renders (``::: distlock.X``) and its public members."""
    for line in (ROOT / "docs" / "api.md").read_text().splitlines():
        if not line.startswith("::: "):
            continue
        module, _, attr = line[4:].strip().rpartition(".")
        obj = getattr(importlib.import_module(module), attr)
        yield line[4:].strip(), obj
        if inspect.isclass(obj):
            for name, member in vars(obj).items():
                if not name.startswith("_"):
                    yield f"{line[4:].strip()}.{name}", member


def test_the_api_pages_docstrings_hold_no_rest_markup() -> None:
    found = []
    for name, obj in _documented():
        doc = getattr(getattr(obj, "__func__", obj), "__doc__", None)
        if isinstance(doc, str):
            found += [f"{name}: {m.group(0)!r}" for m in re.finditer(SPHINX_ROLE.pattern + "|" + REST_MARKUP.pattern,
                                                                       doc, re.MULTILINE)]  # fmt: skip
    assert not found, "reST markup shows as typed on the API page:\n" + "\n".join(found)


def _table_rows(path: Path) -> Iterator[tuple[int, str]]:
    fenced = False
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and line.lstrip().startswith("|"):
            yield n, line


def test_no_pipe_inside_a_code_span_of_a_table_cell() -> None:
    # `int \| None` shows its backslash on the site (Python-Markdown keeps it inside code); an unescaped pipe
    # splits the cell on GitHub. <code>int &#124; None</code> reads `int | None` on both.
    found = [
        f"{path.relative_to(ROOT)}:{n}: `{m.group(2)}`"
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for n, row in _table_rows(path)
        for m in CODE_SPAN.finditer(row)
        if "|" in m.group(2)
    ]
    assert not found, "write <code>a &#124; b</code> in a table cell:\n" + "\n".join(found)


def test_code_blocks_scroll_sideways_instead_of_being_cut() -> None:
    # the readthedocs theme clips the page (html, body { overflow-x: hidden }) and lets long code lines run
    # past the content column: without this rule their ends cannot be seen
    assert re.search(r"^extra_css:\n\s+- css/extra\.css", (ROOT / "mkdocs.yml").read_text(), re.MULTILINE)
    css = (ROOT / "docs" / "css" / "extra.css").read_text()
    assert re.search(r"\.rst-content pre code \{[^}]*overflow-x: auto;", css)
