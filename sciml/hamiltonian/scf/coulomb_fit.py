r"""Density-fitted Coulomb matrix from the three-centre integrals and a Cholesky factor of the auxiliary metric.

Robust Coulomb fitting (Whitten 1973; Vahtras, Almlöf & Feyereisen 1993):

    J_ij = Σ_PQ (ij|P) [V⁻¹]_PQ Σ_kl (Q|kl) D_kl,        V_PQ = (P|Q),

with ``(ij|P)`` kept for ``i ≥ j`` (nao(nao+1)/2 × naux) and ``V`` factorised once. pyscf's ``df.DF`` computes the
same J from Cholesky-transformed factors ``V^(-1/2) (Q|ij)``, whose transformation is a triangular solve over the
whole three-centre tensor; here each J is two matrix–vector products and one small solve instead, with a cheaper
set-up and the same J up to rounding (checked against pyscf in ``tests/unit/test_coulomb_fit.py``).

:class:`CoulombFit` is a ``pyscf.df.DF`` that answers Coulomb-only requests this way (the ``"fast"`` H0 of pure
functionals, :mod:`sciml.hamiltonian.scf.h0`); exchange, range-separated or complex requests, a three-centre tensor
larger than ``max_memory`` (MB) and a metric that is not numerically positive definite go to pyscf's own path.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
from pyscf import df, lib
from pyscf.df import incore

__all__ = ["CoulombFit"]


class CoulombFit(df.DF):
    """``pyscf.df.DF`` with Coulomb-only builds from ``(ij|P)`` and ``chol(V)`` (module docstring).

    Parameters
    ----------
    mol : pyscf.gto.Mole
        The molecule.
    auxbasis : str
        Auxiliary (fitting) basis, e.g. ``"def2-universal-jfit"``.

    """

    def __init__(self, mol, auxbasis: str):
        super().__init__(mol, auxbasis=auxbasis)
        self._int3c: np.ndarray | None = None
        self._metric = None

    def reset(self, mol=None):
        """Drop the kept factors (and pyscf's), e.g. for a new geometry."""
        self._int3c, self._metric = None, None
        return super().reset(mol)

    def build(self):
        """Compute ``(ij|P)`` (packed ``i ≥ j``) and the Cholesky factor of ``V``; else pyscf's factors."""
        if self._int3c is not None or self._cderi is not None:
            return self
        auxmol = df.addons.make_auxmol(self.mol, self.auxbasis)
        nao = self.mol.nao_nr()
        if nao * (nao + 1) // 2 * auxmol.nao_nr() * 8 / 1e6 > self.max_memory:
            return super().build()  # out of core
        try:
            metric = scipy.linalg.cho_factor(auxmol.intor("int2c2e", hermi=1), lower=True)
        except np.linalg.LinAlgError:
            return super().build()  # near-dependent fitting basis: pyscf's eigen-decomposition
        self.auxmol, self._metric = auxmol, metric
        self._int3c = incore.aux_e2(self.mol, auxmol, "int3c2e", aosym="s2ij")  # (npair, naux)
        return self

    def get_jk(self, dm, hermi=1, with_j=True, with_k=True, direct_scf_tol=1e-13, omega=None):
        """``(J, None)`` for Coulomb-only requests on real densities ``(..., nao, nao)``; else pyscf's ``get_jk``."""
        dm = np.asarray(dm)
        if with_k or omega is not None or np.iscomplexobj(dm):
            if self._cderi is None:
                super().build()
            return super().get_jk(dm, hermi, with_j, with_k, direct_scf_tol, omega)
        self.build()
        if self._int3c is None:
            return super().get_jk(dm, hermi, with_j, with_k, direct_scf_tol, omega)
        return self.coulomb(dm), None

    def coulomb(self, dm: np.ndarray) -> np.ndarray:
        """J (same shape as ``dm``, Hartree); J depends only on the symmetric part of each density."""
        nao = dm.shape[-1]
        dms = dm.reshape(-1, nao, nao)
        packed = lib.pack_tril(dms + dms.transpose(0, 2, 1))
        diag = np.arange(nao)
        packed[:, diag * (diag + 3) // 2] *= 0.5  # the diagonal entries (i, i) of the packed lower triangle
        fitted = scipy.linalg.cho_solve(self._metric, (packed @ self._int3c).T)  # (naux, n)
        return lib.unpack_tril((self._int3c @ fitted).T).reshape(dm.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the kept factors (three-centre tensor, or pyscf's ``_cderi`` when it built them)."""
        held = [a for a in (self._int3c, self._cderi) if isinstance(a, np.ndarray)]
        return sum(a.nbytes for a in held)
