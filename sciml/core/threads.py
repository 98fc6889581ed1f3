"""How many CPU threads torch uses in the verbs that run a model (predict, export, calibrate): one rule.

1. ``--threads N`` when given;
2. else ``OMP_NUM_THREADS`` when set (job scripts set it from the CPUs a scheduler gave the task);
3. else the cores free now: the cores this process may run on minus the cores kept busy by other work over the
   last minute (the 1-minute load average, rounded to the nearest whole core), at least one.

Why not torch's own default (one thread per core): the threads of one operation wait for the slowest of them, so
when another process holds a core, the thread that shares it sets the pace of every forward pass and the command
runs several times slower than on one thread. Counting busy cores keeps the speed-up of idle cores without that
collapse; ``benchmarks/threads.py`` measures the three choices side by side (``docs/benchmarks.md``).

Cheap to import (no torch): the CLI decides the number before its heavy imports, so a bad value fails at once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

__all__ = ["ENV", "choose_threads", "free_cores", "torch_threads", "usable_cores"]

ENV = "OMP_NUM_THREADS"


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS reports one, else all cores)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no sched_getaffinity (macOS, Windows)
        return max(1, os.cpu_count() or 1)


def free_cores(load: float | None = None, cores: int | None = None) -> int:
    """Usable cores minus the cores busy over the last minute (``load``: the 1-minute load average), at least 1.

    Parameters
    ----------
    load : float, optional
        Load average to use (default: ``os.getloadavg()[0]``; ``0`` where the OS has none).
    cores : int, optional
        Usable cores (default: :func:`usable_cores`).

    """
    cores = usable_cores() if cores is None else cores
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # no load average (Windows)
            load = 0.0
    busy = int(load + 0.5)  # nearest whole core, halves up
    return max(1, min(cores, cores - busy))


def _whole(value, name: str) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a whole number; give a thread count >= 1") from None
    if n < 1:
        raise ValueError(f"{name} must be >= 1, got {n}")
    return n


def choose_threads(requested: int | None = None, environ: Mapping[str, str] | None = None,
                   flag: str = "--threads") -> tuple[int, str]:
    """Torch threads for a command and where the number came from.

    Parameters
    ----------
    requested : int, optional
        ``--threads`` as given (``None``: not given).
    environ : mapping, optional
        Environment to read ``OMP_NUM_THREADS`` from (default: ``os.environ``).
    flag : str
        Option name for the error message.

    Returns
    -------
    tuple
        ``(threads, source)``, source one of ``"--threads"``, ``"OMP_NUM_THREADS"``, ``"free cores"``.

    Raises
    ------
    ValueError
        ``requested`` or ``OMP_NUM_THREADS`` below 1 or not a whole number (one line naming it).

    """
    if requested is not None:
        return _whole(requested, flag), flag
    env = str((os.environ if environ is None else environ).get(ENV, "")).strip()
    if env:  # OpenMP allows a list for nested levels ("4,2"): the first level is torch's
        return _whole(env.split(",")[0], ENV), ENV
    return free_cores(), "free cores"


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Set torch's intra-op threads to ``n`` for the block, then restore them (torch is imported on entry)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
