r"""Self-consistent refinement of a predicted Hamiltonian: a few Fock builds, each followed by a Newton step.

The Kohn–Sham Hamiltonian is the fixed point of ``g(H) = F[D(H)]``: diagonalise ``H C = S C ε``, fill the lowest
``n_occ`` orbitals (:func:`density_matrix`), build the Fock matrix of that density. A prediction ``H_0`` near the
fixed point is refined by ``steps`` builds of ``g``, each turned into a step in one of three ways (``method``):

``"newton"`` (default) and ``"newton-xc"``
    Solve the linearised fixed-point equation for the step ``δ`` with residual ``r = g(H) − H``:

        (1 − K χ₀) δ = r,        χ₀[v] = 2 Σ_{i occ, a virt} (C_a C_iᵀ + C_i C_aᵀ) (C_aᵀ v C_i) / (ε_i − ε_a),

    ``χ₀`` the first-order change of the density with ``H`` (the independent-particle response of the current
    orbitals), by GMRES (Saad & Schultz 1986) to relative tolerance :data:`NEWTON_TOL`. ``K`` approximates
    ``∂F/∂D``: ``"newton"`` takes its Coulomb part ``v_H`` alone, so ``1 − v_H χ₀`` is the RPA dielectric operator
    of the dielectric-matrix scheme (Ho, Ihm & Joannopoulos 1982, PRB 25, 4260; Anglade & Gonze 2008, PRB 78,
    045126); each product is one Coulomb build of a trial density (for the fast H0, a contraction of the kept
    density-fitting factors), and what a step leaves is the XC kernel's share of the response. ``"newton-xc"``
    takes the whole Kohn–Sham kernel of the builds (Coulomb, XC kernel on the builds' grid, exact exchange where
    the functional has it: pyscf's ``gen_response``): the exact Jacobian, so the error after a step is second order
    in the error before it, at an XC-kernel integration per product. The products are not Fock builds; their count
    is :attr:`Refinement.products`, their cost is in ``docs/benchmarks.md``.
``"anderson"``
    Anderson mixing (Anderson 1965; Walker & Ni 2011, SIAM J. Numer. Anal. 49, 1715): with residuals
    ``r_i = g(H_i) − H_i`` of the last ``depth`` iterates,

        c = argmin_{Σc = 1} ‖Σ_i c_i r_i‖₂,    H_{k+1} = Σ_i c_i (H_i + β r_i),

    (the first step is ``H_1 = H_0 + β r_0``). First order: each build shrinks the error by about half.

Each build is made the model's H0 way, its XC on a coarse grid corrected to the H0 build's
(:class:`sciml.hamiltonian.scf.two_grid.TwoGridFock`), so the refined H converges to the SCF solution of that build,
which differs from the reference SCF by the H0 method's error and by the change of the grid correction between
the SAD and the SCF density. How close a few builds bring the network's prediction, and how that compares with
starting from H0 or the ridge alone: ``docs/hamiltonian.md`` and ``docs/benchmarks.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: AO values and density-fitting factors the refinement's builds may keep (MB); see ``TwoGridFock(cache_mb=...)``
CACHE_MB = 1024.0
#: how a build becomes a step (module docstring); the first is the default
METHODS = ("newton", "newton-xc", "anderson")
DEFAULT_METHOD = METHODS[0]
#: the kernel K each Newton method uses (:func:`solver_response`)
KERNELS = {"newton": "coulomb", "newton-xc": "kohn-sham"}
#: Anderson mixing: β (fraction of the residual taken) and the number of iterates combined
BETA, DEPTH = 0.5, 6
#: Newton steps: GMRES's relative tolerance and its most response products per step
NEWTON_TOL, NEWTON_MAX_PRODUCTS = 1e-2, 40
#: smallest ``ε_a − ε_i`` (Hartree) in ``χ₀``'s denominators, so that a start with a near-zero gap takes a bounded step
GAP_FLOOR = 1e-3


@dataclass
class Refinement:
    """A refined Hamiltonian and how the refinement went.

    Attributes
    ----------
    hamiltonian : (nao, nao) Hartree, pyscf AO order; the last iterate.
    residuals : mean |F[D(H_i)] − H_i| (µHa) of each evaluated iterate ``H_0 … H_{steps−1}``.
    steps : Fock builds made.
    history : with ``refine(..., keep_history=True)``: ``H_1 … H_steps``, the result after each build (a run of
        ``k`` builds ends at ``history[k − 1]``).
    method : one of :data:`METHODS` (module docstring).
    products : kernel products ``K χ₀ v`` made by the Newton steps (0 for Anderson).

    """

    hamiltonian: np.ndarray
    residuals: list[float] = field(default_factory=list)
    steps: int = 0
    history: list[np.ndarray] = field(default_factory=list)
    method: str = DEFAULT_METHOD
    products: int = 0


def density_matrix(h: np.ndarray, s: np.ndarray, n_occupied: int) -> np.ndarray:
    """Closed-shell density ``2 C_occ C_occᵀ`` (nao, nao) of ``H C = S C ε`` for ``H``, ``S`` (nao, nao)."""
    return _density(*_orbitals(h, s), n_occupied)


def _orbitals(h: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from scipy.linalg import eigh

    return eigh(h, s)


def _density(eps: np.ndarray, c: np.ndarray, n_occupied: int) -> np.ndarray:
    occ = c[:, :n_occupied]
    return 2.0 * occ @ occ.T


def density_response(eps: np.ndarray, c: np.ndarray, n_occupied: int):
    """``v -> χ₀[v]`` (nao, nao): the first-order change of the closed-shell density with ``H`` (module docstring).

    ``eps`` ``(nmo,)`` and ``c`` ``(nao, nmo)``: the orbitals of ``H C = S C ε`` (``Cᵀ S C = 1``). Denominators are
    kept at least :data:`GAP_FLOOR` from zero.
    """
    occ, virt = c[:, :n_occupied], c[:, n_occupied:]
    denom = np.minimum(eps[:n_occupied, None] - eps[None, n_occupied:], -GAP_FLOOR)  # ε_i − ε_a < 0

    def chi0(v: np.ndarray) -> np.ndarray:
        change = virt @ (occ.T @ v @ virt / denom).T  # δC_i = Σ_a C_a (C_aᵀ v C_i) / (ε_i − ε_a): (nao, n_occ)
        return 2.0 * (change @ occ.T + occ @ change.T)

    return chi0


def solver_response(solver, c: np.ndarray, n_occupied: int, kernel: str = "coulomb"):
    """``δD -> K[δD]`` (nao, nao) of the pyscf mean-field ``solver``, at the density of orbitals ``c`` (nao, nmo).

    ``kernel``: ``"coulomb"`` (the Coulomb matrix of ``δD``, the way ``solver`` builds it) or ``"kohn-sham"`` (the
    whole linear response of its Fock matrix, pyscf's ``gen_response``).
    """
    if kernel == "coulomb":
        return lambda dens: solver.get_j(solver.mol, dens, hermi=1)
    mo_occ = np.zeros(c.shape[1])
    mo_occ[:n_occupied] = 2.0
    return solver.gen_response(mo_coeff=c, mo_occ=mo_occ, hermi=1)


def anderson_weights(residuals: list[np.ndarray]) -> np.ndarray:
    """``c`` minimising ``‖Σ c_i r_i‖₂`` subject to ``Σ c_i = 1`` (the bordered normal equations, least squares)."""
    n = len(residuals)
    flat = np.stack([r.ravel() for r in residuals])
    system = np.ones((n + 1, n + 1))
    system[:n, :n], system[n, n] = flat @ flat.T, 0.0
    rhs = np.zeros(n + 1)
    rhs[n] = 1.0
    return np.linalg.lstsq(system, rhs, rcond=None)[0][:n]


def newton_step(r: np.ndarray, chi0, kernel, tol: float = NEWTON_TOL) -> tuple[np.ndarray, int]:
    """The step ``δ`` (nao, nao, symmetric) solving ``(1 − K χ₀) δ = r`` by GMRES, and the products it made."""
    from scipy.sparse.linalg import LinearOperator, gmres

    n, made = r.shape[0], [0]

    def apply(x: np.ndarray) -> np.ndarray:
        made[0] += 1
        v = x.reshape(n, n)
        v = 0.5 * (v + v.T)
        return (v - kernel(chi0(v))).ravel()

    operator = LinearOperator((n * n, n * n), matvec=apply, dtype=np.float64)
    x, _ = gmres(operator, r.ravel(), rtol=tol, restart=NEWTON_MAX_PRODUCTS, maxiter=1)  # best iterate if unmet
    step = x.reshape(n, n)
    return 0.5 * (step + step.T), made[0]


def refine(h: np.ndarray, fock, s: np.ndarray, n_occupied: int, steps: int, method: str = DEFAULT_METHOD,
           response=None, beta: float = BETA, depth: int = DEPTH, keep_history: bool = False) -> Refinement:
    """Refine ``h`` (nao, nao, Hartree) by ``steps`` Fock builds ``fock(D)`` (module docstring).

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
    method : str
        One of :data:`METHODS`.
    response : callable, optional
        Newton: ``(C, n_occupied, kernel) -> (δD -> K[δD])``, the kernel (:data:`KERNELS`) of ``fock``'s builds at
        the orbitals ``C``; default ``fock.response`` (:class:`~sciml.hamiltonian.scf.two_grid.TwoGridFock` has
        one).
    beta : float
        Anderson: mixing fraction in (0, 1].
    depth : int
        Anderson: how many iterates are combined (≥ 1).
    keep_history : bool
        Keep the iterate after every build (:attr:`Refinement.history`), e.g. for an error-versus-builds curve.

    """
    if steps < 0:
        raise ValueError(f"refinement steps must be >= 0, got {steps}")
    if method not in METHODS:
        raise ValueError(f"unknown refinement method {method!r}; use one of {', '.join(METHODS)}")
    if method == "anderson" and (not 0 < beta <= 1 or depth < 1):
        raise ValueError(f"need 0 < beta <= 1 and depth >= 1, got beta={beta}, depth={depth}")
    response = response or getattr(fock, "response", None)
    newton = method in KERNELS
    if newton and response is None:
        raise ValueError("Newton refinement needs the kernel of the Fock builds: pass response=, or method='anderson'")
    out = Refinement(h, method=method)
    iterates, residuals = [], []
    for _ in range(steps):
        eps, c = _orbitals(h, s)
        r = fock(_density(eps, c, n_occupied)) - h
        out.residuals.append(float(np.abs(r).mean() * 1e6))
        if newton:
            kernel = response(c, n_occupied, KERNELS[method])
            step, made = newton_step(r, density_response(eps, c, n_occupied), kernel)
            h, out.products = h + step, out.products + made
        else:
            iterates, residuals = (iterates + [h])[-depth:], (residuals + [r])[-depth:]
            weights = anderson_weights(residuals)
            h = sum(w * (x + beta * ri) for w, x, ri in zip(weights, iterates, residuals, strict=True))
            h = 0.5 * (h + h.T)
        if keep_history:
            out.history.append(h)
    out.hamiltonian, out.steps = h, steps
    return out
