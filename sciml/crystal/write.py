"""Stream prediction rows to a CSV file atomically, with units in a header comment."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from contextlib import nullcontext

from sciml.crystal.artifact import CrystalPredictor
from sciml.crystal.predict import columns
from sciml.core.io.atomic import atomic_open


def write_rows(rows: Iterable[dict], predictor: CrystalPredictor, path: str | None,
               keep: int = 50) -> tuple[list[dict], int, int]:
    """Write ``rows`` to ``path`` (nothing on disk when ``path`` is None).

    Returns the first ``keep`` rows (for display), the number of rows and the number of error rows. The file
    appears only once complete (temp file + rename), so a crash never leaves a half-written CSV.
    """
    t = predictor.target
    head, n_rows, n_errors = [], 0, 0
    with atomic_open(path, "w", newline="", encoding="utf-8") if path else nullcontext(io.StringIO()) as handle:
        handle.write(f"# sciml crystal predict; model: {predictor.path.name}; {t['name']} in {t['unit']}; "
                     f"lower/upper: conformal interval at miscoverage alpha\n")
        writer = csv.DictWriter(handle, fieldnames=columns(t["name"]))
        writer.writeheader()
        for row in rows:
            writer.writerow(row)
            n_rows += 1
            n_errors += bool(row["error"])
            if len(head) < keep:
                head.append(row)
    return head, n_rows, n_errors
