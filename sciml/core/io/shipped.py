"""Where the shipped models and example inputs live: the source tree, or the installed package data.

In a clone (or an editable install) they are the repository's ``checkpoints/`` and ``examples/`` folders. A
regular ``pip install .`` copies both into the wheel as ``sciml/_shipped/{checkpoints,examples}`` (see
``pyproject.toml``), so the default model of every predict command works without the source tree.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[2]  # .../sciml


def shipped_path(relative: str) -> Path:
    """The shipped file or folder ``relative`` (e.g. ``"checkpoints/perov5-heat-all"``).

    The source tree's copy wins when it exists (a clone); otherwise the installed package data. The path
    returned may not exist (a stripped install); loaders then fail with their own "no such artifact" error.
    """
    source = _PACKAGE.parent / relative
    if source.exists():
        return source
    return _PACKAGE / "_shipped" / relative
