r"""Fock builds for the refinement on a coarse XC grid, corrected to the fine grid at the density that built H0.

A Kohn–Sham build ``F[D] = h + J[D] + V_xc^g[D]`` costs mostly its XC integral on the grid ``g``. The refinement
(:mod:`sciml.hamiltonian.scf.refine`) makes several builds of one molecule; :class:`TwoGridFock` makes them on a coarse
grid ``c`` (pyscf level one below the H0 build's, :data:`COARSER_BY`) and adds the fine grid's difference at the SAD
density ``D_0``, which the H0 build has already paid for:

    F̃[D] = F_c[D] + (H_0 − F_c[D_0]),        H_0 = F_f[D_0],

so that ``F̃[D_0] = H_0`` exactly and ``F̃[D] − F_f[D] = δ(D_0) − δ(D)`` with ``δ = V_xc^f − V_xc^c``: the fixed
point of ``F̃`` differs from the fine builds' only by how much the grid error changes between ``D_0`` and the SCF
density. A coarse build costs a fraction of a fine one and lands as near the reference SCF; one level, not more,
because the grid error's change between ``D_0`` and the SCF density grows with the grid error (the measurements:
``docs/hamiltonian.md``). Coulomb (density-fitted or exact) is the fine solver's, shared, so it is not
approximated. Hartree–Fock has no grid, and a fine grid no finer than the coarse one needs no
correction: the fine solver builds directly.
"""

from __future__ import annotations

import numpy as np

#: how many pyscf grid levels below the fine grid the builds run (level 0 at the least)
COARSER_BY = 1


class TwoGridFock:
    """``D -> F̃[D]`` (nao, nao, Hartree) of one molecule: coarse-grid builds corrected at ``D_0`` (module docstring).

    Parameters
    ----------
    fine : pyscf mean-field object
        The solver that built ``h0`` (:func:`sciml.hamiltonian.scf.h0.fock_solver`, its DF factors kept).
    h0 : np.ndarray
        ``F_f[D_0]`` (nao, nao), pyscf AO order.
    d0 : np.ndarray
        The density ``D_0`` (nao, nao) it was built from.
    cache_mb : float
        AO values on the coarse grid kept between builds (MB;
        :class:`~sciml.hamiltonian.scf.numint_cache.CachedNumInt`).
    level : int, optional
        Coarse grid level; default one level below the fine grid's (:data:`COARSER_BY`), at least 0.

    """

    def __init__(self, fine, h0: np.ndarray, d0: np.ndarray, cache_mb: float, level: int | None = None):
        self.fine, self.h0, self.d0, self.cache_mb = fine, h0, d0, float(cache_mb)
        grids = getattr(fine, "grids", None)
        self.level = level if level is not None or grids is None else max(grids.level - COARSER_BY, 0)
        self._coarse, self._correction = None, None

    @property
    def corrected(self) -> bool:
        """Whether builds go to the coarse grid (False: Hartree–Fock, or a fine grid no finer than the coarse)."""
        grids = getattr(self.fine, "grids", None)
        return grids is not None and hasattr(self.fine, "_numint") and grids.level > self.level

    def __call__(self, dens: np.ndarray) -> np.ndarray:
        solver = self._solver()
        return solver.get_fock(dm=dens) + (self._correction if solver is not self.fine else 0.0)

    def response(self, c: np.ndarray, n_occupied: int, kernel: str = "coulomb"):
        """``δD -> K[δD]`` (nao, nao): the builder's kernel at the closed-shell density of orbitals ``c`` (nao, nmo).

        The correction is constant, so ``∂F̃/∂D`` is the builder's own (coarse-grid XC kernel, shared Coulomb);
        ``kernel`` as :func:`sciml.hamiltonian.scf.refine.solver_response`. What a Newton step of the refinement
        needs.
        """
        from sciml.hamiltonian.scf.refine import solver_response

        return solver_response(self._solver(), c, n_occupied, kernel)

    def _solver(self):
        """The solver that builds: the coarse one, made (with the correction at ``D_0``) on first use; else the fine."""
        if not self.corrected:
            return self.fine
        if self._coarse is None:
            self._coarse = self._coarse_solver()
            self._correction = self.h0 - self._coarse.get_fock(dm=self.d0)
        return self._coarse

    def _coarse_solver(self):
        from pyscf.dft import gen_grid

        from sciml.hamiltonian.scf.numint_cache import CachedNumInt

        coarse = self.fine.copy()  # shallow: the DF factors (or the four-centre integrals) are shared
        coarse.grids = gen_grid.Grids(self.fine.mol)
        coarse.grids.level = self.level
        coarse._numint = CachedNumInt(self.cache_mb)
        return coarse

    def release(self) -> None:
        """Drop the coarse solver and give its AO values back (:func:`~sciml.hamiltonian.scf.numint_cache.release`)."""
        from sciml.hamiltonian.scf.numint_cache import release

        if self._coarse is not None:
            release(self._coarse)
        self._coarse, self._correction = None, None

    @property
    def nbytes(self) -> int:
        """Bytes held between builds: the fine solver's density-fitting factors and the coarse AO values."""
        with_df = getattr(self.fine, "with_df", None)
        held = getattr(with_df, "nbytes", 0)
        if not held and isinstance(getattr(with_df, "_cderi", None), np.ndarray):  # pyscf's DF (exchange)
            held = with_df._cderi.nbytes
        return held + (0 if self._coarse is None else self._coarse._numint.cached_bytes)
