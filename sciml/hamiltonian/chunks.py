"""Group prepared molecules into network calls with bounded memory.

A chunk closes when it holds ``size`` molecules, or before the next molecule would take it past ``max_pairs``
directed atom pairs ``Σ n_atoms²`` (the ridge's features grow with them, about a quarter MB per pair in float64),
or past ``max_mb`` MB of refinement solvers held (:attr:`TwoGridFock.nbytes
<sciml.hamiltonian.scf.two_grid.TwoGridFock.nbytes>`). A molecule larger than the budget goes alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

import numpy as np

from sciml.hamiltonian.scf.molecule import ZerothStep
from sciml.hamiltonian.structure import HamiltonianStructure

__all__ = ["MAX_PAIRS", "Prepared", "chunks"]

#: most directed atom pairs ``Σ n_atoms²`` in one network call (4096 pairs ≈ 1 GB of ridge features)
MAX_PAIRS = 4096


class Prepared(NamedTuple):
    """One molecule ready for the network: its folder name, structure (H0 and S blocks), pyscf matrices, reference.

    ``reference``: a reference H ``(nao, nao)`` (pyscf order, Hartree) to compare with, or None.
    """

    name: str
    structure: HamiltonianStructure
    step: ZerothStep
    reference: np.ndarray | None = None

    @property
    def pairs(self) -> int:
        """Directed atom pairs ``n_atoms²``."""
        return len(self.structure.numbers) ** 2

    @property
    def solver_mb(self) -> float:
        """MB the refinement's Fock builds hold (0 without them)."""
        return 0.0 if self.step.fock is None else self.step.fock.nbytes / 1e6


def chunks(items: Iterable[Prepared], size: float, max_pairs: float, max_mb: float) -> Iterator[list[Prepared]]:
    """Consecutive lists of ``items`` within the budgets (module docstring); input order kept.

    The next item is taken (and so prepared) before the chunk it would overflow is handed on.
    """
    pending: list[Prepared] = []
    for item in items:
        held, held_mb = sum(p.pairs for p in pending), sum(p.solver_mb for p in pending)
        if pending and (held + item.pairs > max_pairs or held_mb + item.solver_mb > max_mb):
            yield pending
            pending = []
        pending.append(item)
        if len(pending) >= size:
            yield pending
            pending = []
    if pending:
        yield pending
