"""docs/design.md's layout names every package folder and module of ``sciml``, and nothing that is not there.

The layout is the first fenced block of the section ``## 1. Layout``: a tree, one folder or a comma-separated list
of files per line, nesting by indentation, free text after ``#``. A line ``name/`` opens a folder; the names on
deeper lines are inside it. Only entries under ``sciml/`` are checked. A module added, moved or removed without
its line in the layout fails here with its path.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"

#: A folder (``name/``) or a Python module (``name.py``) before the line's ``#`` comment.
ENTRY = re.compile(r"^[A-Za-z_][\w]*(/|\.py)$")


def layout_block(text: str) -> str:
    """The first fenced block of the ``## 1. Layout`` section."""
    section = re.search(r"^## 1\. Layout.*?$(.*?)(?=^## )", text, flags=re.S | re.M)
    assert section, "docs/design.md has no '## 1. Layout' section"
    block = re.search(r"^```[^\n]*\n(.*?)^```", section.group(1), flags=re.S | re.M)
    assert block, "the Layout section of docs/design.md has no fenced block"
    return block.group(1)


def layout_paths(block: str) -> set[str]:
    """Paths the tree names: ``sciml/core/`` for folders, ``sciml/core/keys.py`` for modules."""
    paths: set[str] = set()
    stack: list[tuple[int, str]] = []  # (indent, folder path ending in "/")
    for line in block.splitlines():
        names = [t for t in re.split(r"[,\s]+", line.split("#", 1)[0]) if ENTRY.match(t)]
        if not names:
            continue
        indent = len(line) - len(line.lstrip(" "))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else ""
        for name in names:
            paths.add(parent + name)
        folders = [n for n in names if n.endswith("/")]
        if folders:
            stack.append((indent, parent + folders[-1]))
    return paths


def package_paths() -> set[str]:
    """Every package folder and module of ``sciml`` (``__init__.py`` and caches left out)."""
    paths = {"sciml/"}
    for path in (ROOT / "sciml").rglob("*.py"):
        rel = path.relative_to(ROOT)
        if "__pycache__" in rel.parts:
            continue
        for i in range(2, len(rel.parts)):
            paths.add("/".join(rel.parts[:i]) + "/")
        if path.name != "__init__.py":
            paths.add(rel.as_posix())
    return paths


def test_layout_parser_reads_nesting_lists_and_comments():
    block = ("README.md        # not checked\n"
             "sciml/\n"
             "  core/          # what every family uses\n"
             "    keys.py, types.py  # fields; a.py in a comment is ignored\n"
             "    io/\n"
             "      artifact.py\n"
             "    train.py\n"
             "  cli/           # main.py\n")
    assert layout_paths(block) == {"sciml/", "sciml/core/", "sciml/core/keys.py", "sciml/core/types.py",
                                   "sciml/core/io/", "sciml/core/io/artifact.py", "sciml/core/train.py",
                                   "sciml/cli/"}


def test_design_layout_names_every_module_of_the_package():
    named = {p for p in layout_paths(layout_block(DESIGN.read_text(encoding="utf-8"))) if p.startswith("sciml/")}
    actual = package_paths()
    missing, stale = sorted(actual - named), sorted(named - actual)
    assert not missing and not stale, (
        "docs/design.md §1 Layout is out of step with sciml/:\n"
        + "".join(f"  missing from the layout: {p}\n" for p in missing)
        + "".join(f"  in the layout but not in sciml/: {p}\n" for p in stale))
