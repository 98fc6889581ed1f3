r"""Self-consistent refinement of a predicted Hamiltonian: a few Fock builds with Anderson mixing.

The Kohn–Sham Hamiltonian is the fixed point of ``g(H) = F[D(H)]``: diagonalise ``H C = S C ε``, fill the lowest
``n_occ`` orbitals (:func:`density_matrix`), build the Fock matrix of that density. A prediction ``H_0`` near the
fixed point is refined by ``steps`` builds of ``g`` combined by Anderson mixing (Anderson 1965; Walker & Ni 2011,
SIAM J. Numer. Anal. 49, 1715): with residuals ``r_i = g(H_i) − H_i`` of the last ``depth`` iterates,

    c = argmin_{Σc = 1} ‖Σ_i c_i r_i‖₂,    H_{k+1} = Σ_i c_i (H_i + β r_i),

(the first step is ``H_1 = H_0 + β r_0``). Each step costs one Fock build made the model's H0 way, its XC on a
coarse grid corrected to the H0 build's (:class:`sciml.hamiltonian.scf.two_grid.TwoGridFock`), so the refined H
converges to the SCF solution of that build, which differs from the reference SCF by the H0 method's error and by
the change of the grid correction between the SAD and the SCF density. How close a few builds bring the network's
prediction, and how that compares with starting from H0 or the ridge alone: ``docs/hamiltonian.md`` and
``docs/benchmarks.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: AO values and density-fitting factors the refinement's builds may keep (MB); see ``TwoGridFock(cache_mb=...)``
CACHE_MB = 1024.0
#: default mixing: β (fraction of the residual taken) and the number of iterates Anderson combines
BETA, DEPTH = 0.5, 6


@dataclass
class Refinement:
    """A refined Hamiltonian and how the refinement went.

    Attributes
    ----------
    hamiltonian : (nao, nao) Hartree, pyscf AO order; the last mixed iterate.
    residuals : mean |F[D(H_i)] − H_i| (µHa) of each evaluated iterate ``H_0 … H_{steps−1}``.
    steps : Fock builds made.
    history : with ``refine(..., keep_history=True)``: ``H_1 … H_steps``, the result after each build (a run of
        ``k`` builds ends at ``history[k − 1]``).

    """

    hamiltonian: np.ndarray
    residuals: list[float] = field(default_factory=list)
    steps: int = 0
    history: list[np.ndarray] = field(default_factory=list)


def density_matrix(h: np.ndarray, s: np.ndarray, n_occupied: int) -> np.ndarray:
    """Closed-shell density ``2 C_occ C_occᵀ`` (nao, nao) of ``H C = S C ε`` for ``H``, ``S`` (nao, nao)."""
    from scipy.linalg import eigh

    _, c = eigh(h, s)
    occ = c[:, :n_occupied]
    return 2.0 * occ @ occ.T


def anderson_weights(residuals: list[np.ndarray]) -> np.ndarray:
    """``c`` minimising ``‖Σ c_i r_i‖₂`` subject to ``Σ c_i = 1`` (the bordered normal equations, least squares)."""
    n = len(residuals)
    flat = np.stack([r.ravel() for r in residuals])
    system = np.ones((n + 1, n + 1))
    system[:n, :n], system[n, n] = flat @ flat.T, 0.0
    rhs = np.zeros(n + 1)
    rhs[n] = 1.0
    return np.linalg.lstsq(system, rhs, rcond=None)[0][:n]


def refine(h: np.ndarray, fock, s: np.ndarray, n_occupied: int, steps: int, beta: float = BETA,
           depth: int = DEPTH, keep_history: bool = False) -> Refinement:
    """Refine ``h`` (nao, nao, Hartree) by ``steps`` Fock builds ``fock(D)`` with Anderson mixing (module docstring).

    Parameters
    ----------
    h : np.ndarray
        Starting Hamiltonian (nao, nao; pyscf AO order), e.g. a model's prediction.
    fock : callable
        ``D -> F[D]`` (nao, nao), e.g. :class:`~sciml.hamiltonian.scf.two_grid.TwoGridFock`.
    s : np.ndarray
        Overlap (nao, nao).
    n_occupied : int
        Doubly occupied orbitals.
    steps : int
        Fock builds (0 returns ``h`` unchanged).
    beta : float
        Mixing fraction in (0, 1].
    depth : int
        How many iterates are combined (≥ 1).
    keep_history : bool
        Keep the iterate after every build (:attr:`Refinement.history`), e.g. for an error-versus-builds curve.

    """
    if steps < 0:
        raise ValueError(f"refinement steps must be >= 0, got {steps}")
    if not 0 < beta <= 1 or depth < 1:
        raise ValueError(f"need 0 < beta <= 1 and depth >= 1, got beta={beta}, depth={depth}")
    iterates, residuals, means, history = [], [], [], []
    for _ in range(steps):
        dens = density_matrix(h, s, n_occupied)
        r = fock(dens) - h
        means.append(float(np.abs(r).mean() * 1e6))
        iterates, residuals = (iterates + [h])[-depth:], (residuals + [r])[-depth:]
        c = anderson_weights(residuals)
        h = sum(ci * (x + beta * ri) for ci, x, ri in zip(c, iterates, residuals, strict=True))
        h = 0.5 * (h + h.T)
        if keep_history:
            history.append(h)
    return Refinement(h, means, steps, history)
