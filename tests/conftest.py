"""Shared test fixtures."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def pytest_configure(config):
    """Import pyscf (where installed) the package's way before any test module imports it directly.

    The tests then run on the OpenBLAS kernel the commands they check use (``sciml.hamiltonian.scf.blas``).
    """
    if importlib.util.find_spec("pyscf") is not None:
        from sciml.hamiltonian.scf.h0 import import_pyscf

        import_pyscf()


@pytest.fixture(scope="session")
def load_benchmark():
    """``load_benchmark(name)``: the script ``benchmarks/<name>.py`` imported as a module (they are not a package)."""
    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture
def float64():
    """Torch's default dtype float64 and its seed 0 for one test (equivariance and exactness checks), then restored."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    yield
    torch.set_default_dtype(previous)
