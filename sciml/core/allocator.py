"""Keep freed heap memory in the process: fixed glibc ``mallopt`` thresholds for loops of large tensors.

glibc returns a freed block above its mmap threshold to the OS (``munmap``) and trims the top of the heap above
its trim threshold. Both thresholds start low (128 KiB, 256 KiB) and adapt per freed block, so a loop that
allocates and frees tensors of a few MB at every step (an ODE step of the perturbation model: its attention maps)
can pay the kernel to map and zero fresh pages at each allocation, mostly as system time. Fixed thresholds keep
those pages in the process (``benchmarks/allocator.py`` times the README's perturbation command both ways;
``docs/benchmarks.md``). The cost: up to ``trim_bytes`` of freed memory stays with the process. Set
``SCIML_KEEP_FREED_MEMORY=0`` (or glibc's own ``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_``) to keep the
defaults.

The other way round, :func:`release_freed_memory` hands freed heap pages back at once, for code that works through
chunks of a bounded size and must keep its resident memory flat (the crystal diffraction branch on large cells).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

__all__ = ["ENV", "keep_freed_memory", "release_freed_memory"]

ENV = "SCIML_KEEP_FREED_MEMORY"
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc <malloc.h>
GLIBC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def keep_freed_memory(mmap_bytes: int = 32 * 2**20, trim_bytes: int = 256 * 2**20) -> bool:
    """Fix glibc's mmap and trim thresholds for this process; ``True`` when both were set.

    ``False`` (nothing changed) off glibc (no ``mallopt``), when ``SCIML_KEEP_FREED_MEMORY=0``, or when the user
    set glibc's own variables.
    """
    if os.environ.get(ENV, "1") == "0" or any(k in os.environ for k in GLIBC_ENV):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, mmap_bytes)) & bool(mallopt(M_TRIM_THRESHOLD, trim_bytes))


@functools.cache
def _malloc_trim():
    """Return the C library's ``malloc_trim`` (glibc), or ``None`` where there is none."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # no glibc (macOS, musl, Windows)
        return None


def release_freed_memory() -> None:
    """Return freed heap pages to the operating system (glibc only; elsewhere nothing happens).

    glibc keeps freed blocks of a few MiB on its heap, and chunk after chunk of pair temporaries fragments it, so
    without this the resident memory grows with the number of chunks although the live tensors do not.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
