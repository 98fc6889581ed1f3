"""One way for benchmarks to write ``benchmarks/results/*.json``: only when complete, atomically, merging by case.

A benchmark computes its cases in memory and writes once, at the end, so an interrupted or failed run leaves the
results file as it was (never a file holding 3 of 30 cases)::

    from _results import results_file

    with results_file(RESULTS / "crystal.json", header={"threads": 1}) as results:
        for name in cases:
            results[name] = run_case(name)       # nothing on disk yet
    # written here, atomically, only when the block ended without an exception (Ctrl-C included)

``merge=True`` keeps the cases of the existing file that this run did not compute (a run of a few cases updates
those cases only); ``section="crystal"`` merges into one top-level key of a file shared by several scripts.
:func:`merge_results` does the same without the ``with`` block, for a run that already holds every case.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["merge_results", "results_file", "write_json"]


def write_json(path: str | Path, payload: Any) -> Path:
    """Write ``payload`` as indented JSON to ``path`` atomically (temporary file in the same folder, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(payload, indent=1) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def merge_results(path: str | Path, cases: Mapping[str, Any], header: Mapping[str, Any] | None = None,
                  section: str | None = None) -> dict:
    """Write ``cases`` into the results file ``path``, keeping the cases this run did not compute; return the file.

    Parameters
    ----------
    path : str or Path
        Results file (read when it exists; a file that is not a JSON object is an error, never overwritten).
    cases : mapping
        Case name -> result; each replaces the case of the same name.
    header : mapping, optional
        Run-level fields (threads, versions, ...) set beside the cases.
    section : str, optional
        Merge into this top-level key of the file (a file shared by several scripts) instead of the top level.

    """
    path = Path(path)
    try:
        current = json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError as err:
        raise SystemExit(f"error: {path} is not JSON ({err}); move it away before merging into it") from None
    if not isinstance(current, dict):
        raise SystemExit(f"error: {path} does not hold a JSON object; move it away before merging into it")
    target = current.setdefault(section, {}) if section is not None else current
    target.update(header or {})
    target.update(cases)
    write_json(path, current)
    return current


@contextmanager
def results_file(path: str | Path, header: Mapping[str, Any] | None = None, *, merge: bool = False,
                 section: str | None = None) -> Iterator[dict]:
    """Yield a dict of cases to fill; write it to ``path`` when the block ends normally, and only then.

    Parameters
    ----------
    path : str or Path
        Results file.
    header : mapping, optional
        Run-level fields written before the cases.
    merge : bool
        Keep the existing file's other cases (:func:`merge_results`) instead of replacing the file.
    section : str, optional
        Top-level key to write into (implies ``merge``).

    """
    cases: dict = {}
    yield cases  # an exception (or KeyboardInterrupt) propagates from here: nothing is written
    if merge or section is not None:
        merge_results(path, cases, header, section)
    else:
        write_json(path, {**(header or {}), **cases})
    print(f"wrote {path}", flush=True)
