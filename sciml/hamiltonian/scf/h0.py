"""The zeroth-step Hamiltonian H0: the Kohn–Sham matrix of the superposition-of-atomic-densities guess.

``H0 = F[ρ_SAD]`` with ``ρ_SAD`` pyscf's ``minao`` initial guess (NextHAM's zeroth-step Hamiltonian). Two ways to
build it, recorded with the data and the model so that prediction builds H0 the way training did:

``"full"``
    Exact four-centre Coulomb, XC on the SCF's grid (``grid_level``, default 3).
``"fast"``
    Coulomb by density fitting (``def2-universal-jfit``, :class:`~sciml.hamiltonian.scf.coulomb_fit.CoulombFit`;
    ``-jkfit`` and pyscf's ``DF`` when exact exchange is needed: Hartree–Fock and hybrid functionals), XC on grid
    level 1. Several times cheaper than ``"full"`` on organic molecules, and the difference is far below
    ``|H − H0|`` (``docs/hamiltonian.md``); the model learns ``H − H0`` for the H0 it is given, so training and
    prediction must agree. Its XC integral runs over the grid in blocks of about :data:`XC_WORK_MB` (the DF Coulomb
    keeps pyscf's memory limit): pyscf otherwise evaluates all grid points at once in a fresh buffer, whose page
    faults cost more than the integral on some molecules; the sum is the same up to rounding.

A solver that builds many Fock matrices of one molecule (the refinement of :mod:`sciml.hamiltonian.scf.refine`) asks
``fock_solver(..., keep_factors=True)``: the density-fitting factors are computed once and kept in memory, so that
J is one contraction per build; its further builds go to a coarse grid
(:class:`sciml.hamiltonian.scf.two_grid.TwoGridFock`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["H0_METHODS", "check_h0_method", "fock_solver", "import_pyscf", "zeroth_step_matrices"]

#: method -> (density-fitted Coulomb, XC grid level or None for the caller's)
H0_METHODS = {"full": (False, None), "fast": (True, 1)}
JFIT, JKFIT = "def2-universal-jfit", "def2-universal-jkfit"
#: working memory (MB) of the ``"fast"`` XC integral's grid blocks, above what the process already holds
XC_WORK_MB = 64


def import_pyscf():
    """Import pyscf or raise a one-line ImportError naming the ``quantum`` extra.

    The first import loads pyscf's bundled OpenBLAS on the CPU's AVX2 kernel where that library would not find it
    (:mod:`sciml.hamiltonian.scf.blas`).
    """
    import importlib.util

    from sciml.core.optional import require
    from sciml.hamiltonian.scf.blas import import_pyscf_fast

    if importlib.util.find_spec("pyscf") is not None:
        import_pyscf_fast()
    return require("pyscf", "quantum")


def check_h0_method(method: str) -> str:
    """Return ``method`` or raise a one-line ValueError listing the known ones."""
    if method not in H0_METHODS:
        raise ValueError(f"unknown H0 method {method!r}; use one of {', '.join(H0_METHODS)}")
    return method


def fock_solver(mol, xc: str, grid_level: int = 3, method: str = "full", keep_factors: bool = False):
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
    keep_factors : bool
        Build the density-fitting factors now and keep them in memory (for many builds of one molecule; module
        docstring). False: pyscf's default.

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
        if not exchange:  # Coulomb only: (ij|P) and chol((P|Q)), half pyscf's set-up (coulomb_fit)
            from sciml.hamiltonian.scf.coulomb_fit import CoulombFit

            mf.with_df = CoulombFit(mol, JFIT)
        if keep_factors:
            mf.with_df.build()  # the factors in memory: J is then one contraction per build
        mf.max_memory = lib.current_memory()[0] + XC_WORK_MB  # RKS.get_veff: XC blocks get max_memory − current
    mf.verbose = 0
    return mf


def zeroth_step_matrices(mol, xc: str, grid_level: int = 3, method: str = "full", solver=None,
                         with_density: bool = False) -> dict[str, np.ndarray]:
    """``{"H0", "S"}`` (pyscf AO order, Hartree) of a pyscf ``Mole``: ``F[ρ_SAD]`` built by :func:`fock_solver`.

    ``solver``: a :func:`fock_solver` of ``mol`` to build with (e.g. one keeping its factors for further builds).
    ``with_density``: also ``"D0"``, the SAD density matrix (nao, nao) H0 was built from.
    """
    mf = fock_solver(mol, xc, grid_level, method) if solver is None else solver
    dens = mf.get_init_guess(key="minao")
    out = {"H0": mf.get_fock(dm=dens), "S": mf.get_ovlp()}
    return out | {"D0": dens} if with_density else out
