"""Stream prediction rows to a CSV file atomically, with units in a header comment."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field

from sciml.core.io.atomic import atomic_open
from sciml.crystal.artifact import CrystalPredictor
from sciml.crystal.predict import columns


@dataclass
class Written:
    """What :func:`write_rows` wrote: the first rows (for display) and counts."""

    head: list[dict] = field(default_factory=list)
    n_rows: int = 0
    n_errors: int = 0
    n_flagged: int = 0  # rows with in_domain false


def write_rows(rows: Iterable[dict], predictor: CrystalPredictor, path: str | None, keep: int = 50) -> Written:
    """Write ``rows`` to ``path`` (nothing on disk when ``path`` is None).

    Returns the first ``keep`` rows (for display), the number of rows, of error rows and of out-of-domain rows.
    The file appears only once complete (temp file + rename), so a crash never leaves a half-written CSV.
    """
    t = predictor.target
    out = Written()
    with atomic_open(path, "w", newline="", encoding="utf-8") if path else nullcontext(io.StringIO()) as handle:
        handle.write(f"# sciml crystal predict; model: {predictor.path.name}; {t['name']} in {t['unit']}; "
                     f"lower/upper: conformal interval at miscoverage alpha, guaranteed only where in_domain is "
                     f"True (domain_pvalue > beta, known elements)\n")
        writer = csv.DictWriter(handle, fieldnames=columns(t))
        writer.writeheader()
        for row in rows:
            writer.writerow(row)
            out.n_rows += 1
            out.n_errors += bool(row["error"])
            out.n_flagged += row["in_domain"] is False
            if len(out.head) < keep:
                out.head.append(row)
    return out
