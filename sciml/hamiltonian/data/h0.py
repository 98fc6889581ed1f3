"""The zeroth-step Hamiltonian H0: the Kohn–Sham matrix of the superposition-of-atomic-densities guess.

``H0 = F[ρ_SAD]`` with ``ρ_SAD`` pyscf's ``minao`` initial guess (NextHAM's zeroth-step Hamiltonian). Two ways to
build it, recorded with the data and the model so that prediction builds H0 the way training did:

``"full"``
    Exact four-centre Coulomb, XC on the SCF's grid (``grid_level``, default 3): the shared data's H0.
``"fast"``
    Coulomb by density fitting (``def2-universal-jfit``; ``-jkfit`` when exact exchange is needed: Hartree–Fock
    and hybrid functionals), XC on grid level 1. For uracil (132 AOs) it is ~5x
    cheaper than ``"full"`` and differs from it by a mean |ΔH0| ≈ 2 µHa (max ≈ 0.15 mHa), far below
    |H − H0| ≈ 6–17 mHa; the model learns ``H − H0`` for the H0 it is given, so training and prediction must agree.
    Its XC integral runs over the grid in blocks of about :data:`XC_WORK_MB` (the DF Coulomb keeps pyscf's memory
    limit): pyscf otherwise evaluates all grid points at once in a fresh buffer (330 MB for indole), and the page
    faults of that allocation cost 0.3–0.5 s on some molecules and not on others. Indole's H0 + S: 0.93 s per
    molecule instead of 0.9–1.6 s; the sum is the same up to rounding (|ΔH0| < 1e-12 Ha).

A solver that builds many Fock matrices of one molecule (the refinement of :mod:`sciml.hamiltonian.refine`) asks
``fock_solver(..., cache_mb=M)``: the density-fitting factors are computed once and kept in memory, and the atomic
orbitals' values on the XC grid are kept from the second build on when they fit in ``M`` MB
(:class:`sciml.hamiltonian.data.numint_cache.CachedNumInt`).
The matrices are the same to rounding; for uracil a further build costs 0.18 s instead of 0.51 s (one thread).
"""

from __future__ import annotations

import numpy as np

__all__ = ["H0_METHODS", "check_h0_method", "fock_solver", "zeroth_step_matrices"]

#: method -> (density-fitted Coulomb, XC grid level or None for the caller's)
H0_METHODS = {"full": (False, None), "fast": (True, 1)}
JFIT, JKFIT = "def2-universal-jfit", "def2-universal-jkfit"
#: working memory (MB) of the ``"fast"`` XC integral's grid blocks, above what the process already holds
XC_WORK_MB = 64


def check_h0_method(method: str) -> str:
    """Return ``method`` or raise a one-line ValueError listing the known ones."""
    if method not in H0_METHODS:
        raise ValueError(f"unknown H0 method {method!r}; use one of {', '.join(H0_METHODS)}")
    return method


def fock_solver(mol, xc: str, grid_level: int = 3, method: str = "full", cache_mb: float = 0.0):
    """The pyscf mean-field object whose ``get_fock(dm=D)`` builds ``F[D]`` the ``method`` way (see the docstring).

    Parameters
    ----------
    mol : pyscf.gto.Mole
        Closed-shell molecule.
    xc : str
        Functional (``"hf"``/``"rhf"``: Hartree–Fock, no grid).
    grid_level : int
        DFT grid level of ``"full"``.
    method : str
        ``"full"`` or ``"fast"`` (see the module docstring).
    cache_mb : float
        > 0: keep the density-fitting factors and up to this many MB of AO values on the grid between builds
        (for many builds of one molecule; module docstring). 0: pyscf's default, nothing kept.

    """
    from pyscf import dft, lib, scf

    density_fit, level = H0_METHODS[check_h0_method(method)]
    if xc.lower() in ("hf", "rhf"):
        mf, exchange = scf.RHF(mol), True
    else:
        mf, exchange = dft.RKS(mol), dft.libxc.hybrid_coeff(xc) != 0
        mf.xc = xc
        mf.grids.level = grid_level if level is None else level
    if density_fit:
        mf = mf.density_fit(auxbasis=JKFIT if exchange else JFIT)  # the DF object keeps mol.max_memory
        if cache_mb > 0:
            mf.with_df.build()  # the factors in memory: J is then one contraction per build
        mf.max_memory = lib.current_memory()[0] + XC_WORK_MB  # RKS.get_veff: XC blocks get max_memory − current
    if cache_mb > 0 and hasattr(mf, "_numint"):
        from sciml.hamiltonian.data.numint_cache import CachedNumInt

        mf._numint = CachedNumInt(cache_mb)
    mf.verbose = 0
    return mf


def zeroth_step_matrices(mol, xc: str, grid_level: int = 3, method: str = "full",
                         solver=None) -> dict[str, np.ndarray]:
    """``{"H0", "S"}`` (pyscf AO order, Hartree) of a pyscf ``Mole``: ``F[ρ_SAD]`` built by :func:`fock_solver`.

    ``solver``: a :func:`fock_solver` of ``mol`` to build with (one that caches, kept for further builds).
    """
    mf = fock_solver(mol, xc, grid_level, method) if solver is None else solver
    return {"H0": mf.get_fock(dm=mf.get_init_guess(key="minao")), "S": mf.get_ovlp()}
