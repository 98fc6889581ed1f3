"""Load pyscf's bundled OpenBLAS with a kernel the CPU can run at full speed.

pyscf's wheels bundle their own OpenBLAS for the C extensions (grid integration of the XC potential, density
fitting, ``lib.dot``). Up to pyscf 2.x that library is OpenBLAS 0.3.3 (2018), whose run-time CPU detection does
not know later x86-64 CPUs (AMD Zen 2 and after, Intel Ice Lake and after): it falls back to an SSE3 kernel
("Prescott", "Barcelona"), and its matrix products run about 3× slower than on the AVX2 kernel the CPU supports.
On such a machine (an AMD EPYC) the AVX2 kernel makes a pyscf SCF 1.4–1.6× faster with the same result
(``benchmarks/pyscf_blas.py``, ``docs/benchmarks.md``).

:func:`import_pyscf_fast` imports pyscf with ``OPENBLAS_CORETYPE=Haswell`` (AVX2 + FMA) when

- ``OPENBLAS_CORETYPE`` is not already set (set it to choose a kernel yourself),
- pyscf is not yet imported (a loaded library keeps its kernel),
- the bundled library is older than :data:`DETECTS_NEW_CPUS` (a newer one detects the CPU itself), and
- the CPU reports ``avx2`` and ``fma`` (Linux ``/proc/cpuinfo``).

The variable is removed again once pyscf has loaded, so libraries loaded later detect their CPU as before; numpy
and scipy load their own OpenBLAS first. :func:`pyscf_blas_core` names the kernel pyscf runs on, so that a timing
can record it.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import sys
from pathlib import Path

__all__ = ["DETECTS_NEW_CPUS", "bundled_openblas", "import_pyscf_fast", "pyscf_blas_core"]

#: the first OpenBLAS release whose detection knows AMD Zen 2/3 and Intel Ice Lake (0.3.13, December 2020)
DETECTS_NEW_CPUS = (0, 3, 13)
FORCED_CORE = "Haswell"
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)\.so$")


def bundled_openblas() -> tuple[Path, tuple[int, int, int] | None] | None:
    """``(path, version)`` of the OpenBLAS inside the installed pyscf package (None: none bundled or no pyscf)."""
    spec = importlib.util.find_spec("pyscf")
    if spec is None or not spec.submodule_search_locations:
        return None
    paths = sorted(path for p in spec.submodule_search_locations for path in (Path(p) / "lib").glob("libopenblas*.so*"))
    if not paths:
        return None
    match = _VERSION.search(paths[0].name)
    return paths[0], tuple(int(v) for v in match.groups()) if match else None


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def needs_forced_core() -> bool:
    """Whether :func:`import_pyscf_fast` would set ``OPENBLAS_CORETYPE`` (module docstring's four conditions)."""
    if "OPENBLAS_CORETYPE" in os.environ or "pyscf" in sys.modules:
        return False
    bundled = bundled_openblas()
    if bundled is None or bundled[1] is None or bundled[1] >= DETECTS_NEW_CPUS:
        return False
    return {"avx2", "fma"} <= _cpu_flags()


def import_pyscf_fast():
    """``import pyscf``, with the bundled OpenBLAS on the AVX2 kernel where it would not find it (module docstring)."""
    if not needs_forced_core():
        import pyscf

        return pyscf
    import numpy  # noqa: F401  (their own OpenBLAS: loaded before the variable is set)
    import scipy.linalg  # noqa: F401

    os.environ["OPENBLAS_CORETYPE"] = FORCED_CORE
    try:
        import pyscf
        import pyscf.lib  # noqa: F401  (loads the bundled OpenBLAS)
    finally:
        del os.environ["OPENBLAS_CORETYPE"]
    return pyscf


def pyscf_blas_core() -> str | None:
    """The kernel pyscf's bundled OpenBLAS runs on (e.g. ``"Haswell"``), once pyscf is imported; else None."""
    bundled = bundled_openblas()
    if bundled is None or "pyscf" not in sys.modules:
        return None
    try:
        library = ctypes.CDLL(str(bundled[0]), mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
    except OSError:
        return None
    library.openblas_get_corename.restype = ctypes.c_char_p
    return library.openblas_get_corename().decode()
