"""A new molecule's overlap ``S``, zeroth-step ``H0`` and Fock builds in a model's basis (pyscf, extra ``quantum``).

The models are closed-shell (restricted Kohn–Sham): :func:`check_closed_shell` refuses an odd electron count
before pyscf sees the molecule.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sciml.hamiltonian.orbitals import OrbitalLayout

__all__ = ["ZerothStep", "check_closed_shell", "zeroth_step"]


class ZerothStep(NamedTuple):
    """What pyscf builds for one molecule before the network runs (pyscf AO order, Hartree).

    Attributes
    ----------
    h0 : ``(nao, nao)``, ``F[ρ_SAD]`` built the model's way (:mod:`sciml.hamiltonian.scf.h0`).
    overlap : ``(nao, nao)``, ``S``.
    n_occupied : doubly occupied orbitals.
    fock : the refinement's Fock builds (:class:`~sciml.hamiltonian.scf.two_grid.TwoGridFock`), or None when
        none were asked for.

    """

    h0: np.ndarray
    overlap: np.ndarray
    n_occupied: int
    fock: object | None = None


def check_closed_shell(numbers, source: str) -> int:
    """Doubly occupied orbitals of the neutral molecule ``numbers`` (Z, ``(n,)``); one-line error for an odd count."""
    electrons = int(np.sum(np.asarray(numbers, dtype=np.int64)))
    if electrons % 2:
        raise ValueError(f"{source}: {electrons} electrons, an odd count (an open-shell molecule or radical); the "
                         "models are closed-shell (restricted Kohn–Sham): give a molecule with an even electron count")
    return electrons // 2


def zeroth_step(numbers, positions, basis: str, xc: str, layout: OrbitalLayout, source: str = "input",
                grid_level: int = 3, h0: str = "full", cache_mb: float = 0.0, built: dict | None = None) -> ZerothStep:
    """Overlap ``S`` and ``H0`` (pyscf) of a molecule (``numbers`` ``(n,)``, ``positions`` ``(n, 3)`` Å), model basis.

    ``h0`` is how the model's training data built H0 (:mod:`sciml.hamiltonian.scf.h0`: ``"full"`` or ``"fast"``).
    ``cache_mb`` > 0: also the refinement's Fock builds (:class:`~sciml.hamiltonian.scf.two_grid.TwoGridFock`: the
    fine solver with its density-fitting factors, H0 and its density; coarse-grid AO values up to ``cache_mb`` MB
    once it builds). ``built``: the molecule's ``{"H0", "S"}`` already built this way (e.g. by the data engine); then
    only what the Fock builds need is made. Raises ImportError (one line) without pyscf, ValueError for an open shell
    or when pyscf's basis differs from the model's; ``source`` names the molecule in the message.
    """
    from sciml.hamiltonian.scf.h0 import fock_solver, import_pyscf, zeroth_step_matrices

    check_closed_shell(numbers, source)
    import_pyscf()
    from pyscf import gto

    mol = gto.M(atom=[(int(z), tuple(p)) for z, p in zip(numbers, positions, strict=True)], basis=basis,
                unit="Angstrom", verbose=0)
    got = OrbitalLayout.from_pyscf_mol(mol)
    for z in set(int(v) for v in numbers):
        if got.shells_of(z) != layout.shells_of(z):
            raise ValueError(f"{source}: basis {basis!r} gives shells {got.shells_of(z)} for Z={z}, the model was "
                             f"trained with {layout.shells_of(z)}; use the training basis")
    if cache_mb <= 0:
        out = built or zeroth_step_matrices(mol, xc, grid_level, h0)
        return ZerothStep(out["H0"], out["S"], mol.nelectron // 2)
    from sciml.hamiltonian.scf.two_grid import TwoGridFock

    solver = fock_solver(mol, xc, grid_level, h0, keep_factors=True)
    if built is None:
        out = zeroth_step_matrices(mol, xc, grid_level, h0, solver, with_density=True)
    else:
        out = built | {"D0": solver.get_init_guess(key="minao")}
    return ZerothStep(out["H0"], out["S"], mol.nelectron // 2, TwoGridFock(solver, out["H0"], out["D0"], cache_mb))
