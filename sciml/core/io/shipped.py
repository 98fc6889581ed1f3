"""Where the shipped models and example inputs live, and how a ``--model`` argument finds its folder.

In a clone (or an editable install) they are the repository's ``checkpoints/`` and ``examples/`` folders. A
regular ``pip install .`` copies both into the wheel as ``sciml/_shipped/{checkpoints,examples}`` (see
``setup.py``), so the default model of every predict command works without the source tree.

:func:`resolve_model` is the one rule that turns what a user typed into an artifact folder, from any working
directory: an existing path wins; otherwise a shipped model name (``perov5-heat-all``, also written
``checkpoints/perov5-heat-all``); otherwise a one-line error suggesting the closest shipped name(s).
"""

from __future__ import annotations

import difflib
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["MODELS", "ModelNotFoundError", "resolve_model", "shipped_models", "shipped_path"]

_PACKAGE = Path(__file__).resolve().parents[2]  # .../sciml
MODELS = "checkpoints"  # folder of the shipped models, in the source tree and in sciml/_shipped/


class ModelNotFoundError(ValueError):
    """A ``--model`` argument that is neither an existing path nor a shipped model name (message is one line)."""


def shipped_path(relative: str) -> Path:
    """The shipped file or folder ``relative`` (e.g. ``"checkpoints/perov5-heat-all"``).

    The source tree's copy wins when it exists (a clone); otherwise the installed package data. The path
    returned may not exist (a stripped install); loaders then fail with their own "no such artifact" error.
    """
    source = _PACKAGE.parent / relative
    if source.exists():
        return source
    return _PACKAGE / "_shipped" / relative


def shipped_models() -> dict[str, Path]:
    """Shipped model name -> artifact folder, sorted by name (folders of ``checkpoints/`` with ``metadata.json``)."""
    folder = shipped_path(MODELS)
    if not folder.is_dir():
        return {}
    return {p.name: p for p in sorted(folder.iterdir()) if (p / "metadata.json").is_file()}


def _shipped_name(model: Path) -> str | None:
    """``name`` for ``name`` or ``checkpoints/name`` (the forms the README uses), else ``None``."""
    parts = model.parts
    if len(parts) == 1 or (len(parts) == 2 and parts[0] == MODELS):
        return parts[-1]
    return None


def resolve_model(model: str | Path) -> Path:
    """The artifact folder that ``model`` names.

    Parameters
    ----------
    model : str or Path
        A path to an artifact folder (relative to the working directory, or absolute), or the name of a shipped
        model, bare (``"perov5-heat-all"``) or as ``"checkpoints/perov5-heat-all"``.

    Returns
    -------
    Path
        ``model`` itself when it exists (an existing path always wins, even a file: the loader then says what is
        wrong with it); otherwise the shipped model's folder.

    Raises
    ------
    ModelNotFoundError
        Neither an existing path nor a shipped name; the message names the closest shipped name(s).

    """
    path = Path(model)
    if path.exists():
        return path
    shipped = shipped_models()
    name = _shipped_name(path)
    if name in shipped:
        return shipped[name]
    close = difflib.get_close_matches(path.name, list(shipped), n=3, cutoff=0.5)
    if close:
        hint = f"did you mean {' or '.join(close)}?"
    else:
        hint = f"shipped models: {', '.join(shipped) or 'none in this install'}"
    raise ModelNotFoundError(f"{model}: no such model folder, nor a shipped model name; {hint} "
                             "(`sciml models` lists them; create a folder with `sciml export`)")


def check_target(model: str | Path, output: str | Path | None) -> Path:
    """The artifact folder a post-hoc operation rewrites, checked before any work.

    A shipped model named by name (not a path) is never rewritten in place: it needs ``output``; an existing
    ``output`` is refused (the operation writes a new folder).
    """
    folder = resolve_model(model)
    if output is None and not Path(model).exists():
        raise ValueError(f"{model} is a shipped model: pass --output DIR to write a calibrated copy")
    if output is not None and Path(output).exists():
        raise FileExistsError(f"{output} already exists; choose another --output")
    return folder


@contextmanager
def target_folder(model: str | Path, output: str | Path | None) -> Iterator[Path]:
    """The artifact folder an operation rewrites: ``model`` itself, or a copy that becomes ``output`` on success.

    With ``output`` the source folder is copied to a hidden sibling of ``output``, the operation runs on the copy,
    and the copy is renamed to ``output`` only when the operation succeeded (the copy is removed otherwise).
    """
    source = resolve_model(model)
    if output is None:
        yield source
        return
    output = Path(output)
    if output.exists():
        raise FileExistsError(f"{output} already exists; choose another --output")
    work = output.parent / f".{output.name}.calibrating"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(source, work)
    try:
        yield work
        work.rename(output)
    finally:
        shutil.rmtree(work, ignore_errors=True)
