"""The product describes the package as it is: no work-session names or issue numbers in its text.

README.md, ``docs/``, ``configs/`` and ``sciml/`` say what the package does and how to run it; the story of how it
got there lives in ``CHANGELOG.md`` (exempt) and the git log. A line that names a session ("the twentieth
session") or an issue number ("issue 13", "issue-13's bar") fails here, with its file and line.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: What is checked: files, and folders searched recursively.
CHECKED = ("README.md", "docs", "configs", "sciml")

#: Case-insensitive: "session" starting a word, and "issue" followed by a number ("issue 13", "issue-13"). An upstream
#: project's issue cited as "issue #N" (with its project name) is a reference, not history, and passes.
HISTORY = re.compile(r"(^|[^a-z])session|issue[ \-]?[0-9]", re.IGNORECASE)

SKIP_DIRS = {"__pycache__"}


def _text_files() -> list[Path]:
    files = []
    for name in CHECKED:
        path = ROOT / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [p for p in sorted(path.rglob("*"))
                      if p.is_file() and not SKIP_DIRS & set(p.relative_to(ROOT).parts)]
    return files


def history_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of every line of ``text`` that names a session or an issue number."""
    return [(i, line.strip()) for i, line in enumerate(text.splitlines(), 1) if HISTORY.search(line)]


def test_the_pattern_finds_history_and_nothing_else():
    assert history_lines("Measured in the twentieth session.\nIssue 14's bar\nissue-13 line\nLightning issue #21406") \
        == [(1, "Measured in the twentieth session."), (2, "Issue 14's bar"), (3, "issue-13 line")]
    assert history_lines("Sessions: 2\nsession_id")[0][0] == 1
    assert history_lines("an issue with numbers\nLightning-AI/pytorch-lightning/issues/21406\npossession") == []


def test_readme_docs_configs_and_package_name_no_session_or_issue():
    found = []
    for path in _text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # a binary file (an image): no prose to check
            continue
        found += [f"{path.relative_to(ROOT)}:{n}: {line[:120]}" for n, line in history_lines(text)]
    assert not found, ("these lines tell history (move it to CHANGELOG.md, describe the package as it is):\n"
                       + "\n".join(found))
