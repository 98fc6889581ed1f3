"""pyscf's bundled OpenBLAS: loaded on the AVX2 kernel where it would not detect the CPU, the user's choice kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("pyscf")

from sciml.hamiltonian.scf import blas  # noqa: E402

PROBE = """
import json, os
from sciml.hamiltonian.scf import blas
before = blas.needs_forced_core()
from sciml.hamiltonian.scf.h0 import import_pyscf
import_pyscf()
print(json.dumps({"forced": before, "core": blas.pyscf_blas_core(), "env": os.environ.get("OPENBLAS_CORETYPE"),
                  "after": blas.needs_forced_core()}))
"""


def _probe(**env) -> dict:
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"} | env
    out = subprocess.run([sys.executable, "-c", PROBE], env=clean, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_forced_kernel_only_while_pyscf_loads():
    got = _probe()
    assert got["env"] is None and got["after"] is False  # restored; a loaded pyscf keeps its kernel
    if got["forced"]:
        assert got["core"] == blas.FORCED_CORE
    bundled = blas.bundled_openblas()
    if bundled is not None and bundled[1] is not None and bundled[1] >= blas.DETECTS_NEW_CPUS:
        assert not got["forced"]


def test_user_choice_is_kept():
    if blas.bundled_openblas() is None:
        pytest.skip("this pyscf bundles no OpenBLAS")
    got = _probe(OPENBLAS_CORETYPE="Prescott")
    assert got["forced"] is False and got["env"] == "Prescott" and got["core"] == "Prescott"


def test_conditions(monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Zen")
    assert not blas.needs_forced_core()
    monkeypatch.delenv("OPENBLAS_CORETYPE")
    monkeypatch.setattr(blas, "bundled_openblas", lambda: ("libopenblas.so", (0, 3, 3)))
    monkeypatch.setitem(sys.modules, "pyscf", sys.modules.get("pyscf") or object())
    assert not blas.needs_forced_core()  # already imported
    monkeypatch.delitem(sys.modules, "pyscf")
    monkeypatch.setattr(blas, "_cpu_flags", lambda: {"sse2", "avx2", "fma"})
    assert blas.needs_forced_core()
    monkeypatch.setattr(blas, "_cpu_flags", lambda: {"sse2", "avx"})
    assert not blas.needs_forced_core()  # no AVX2: the SSE kernel is the right one
    monkeypatch.setattr(blas, "_cpu_flags", lambda: {"avx2", "fma"})
    monkeypatch.setattr(blas, "bundled_openblas", lambda: ("libopenblas.so", (0, 3, 21)))
    assert not blas.needs_forced_core()  # detects the CPU itself
