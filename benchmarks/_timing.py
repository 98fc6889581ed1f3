"""Side-by-side timing for benchmarks: variants of one operation run in rotating order on a shared machine."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["interleaved"]


def interleaved(run: Callable[[str], object], names: list[str], steps: int) -> tuple[dict, dict]:
    """Time ``run(name)`` for every name, ``steps`` times each, after one untimed warm-up call each.

    Round ``k`` starts with ``names[k % len(names)]`` and goes round, so no variant always runs first (right after
    another one's allocations, or as the machine's load changes). Returns ``times`` ``{name: {"wall": [...],
    "cpu": [...]}}`` (seconds; CPU is the process's, summed over threads) and the value each name's last call
    returned (e.g. its loss, to show the variants compute the same thing).
    """
    for name in names:
        run(name)  # warm-up
    times = {name: {"wall": [], "cpu": []} for name in names}
    last = {}
    for k in range(steps):
        for name in names[k % len(names):] + names[:k % len(names)]:
            wall, cpu = time.perf_counter(), time.process_time()
            last[name] = run(name)
            times[name]["wall"].append(time.perf_counter() - wall)
            times[name]["cpu"].append(time.process_time() - cpu)
    return times, last
