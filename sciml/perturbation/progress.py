"""Stage lines of the perturbation family's long phases, on stderr at once (``sciml fit`` and ``sciml data grn``).

Loading a wide screen, choosing the prior and simulating take minutes; :func:`note` prints what is being done and
the seconds since the process's first note, so a user is never left without a line for long. Python ``logging``
is not used here because the verbs configure no handler (its lines would not show).
"""

from __future__ import annotations

import os
import sys
import time

_START: list[float] = []


def note(message: str) -> None:
    """Print ``perturbation [t s]: message`` to stderr (rank 0 only under DDP; silenced by ``SCIML_QUIET=1``)."""
    if os.environ.get("SCIML_QUIET") == "1" or os.environ.get("RANK", "0") != "0":
        return
    if not _START:
        _START.append(time.perf_counter())
    print(f"perturbation [{time.perf_counter() - _START[0]:.0f} s]: {message}", file=sys.stderr, flush=True)
