r"""Distances and couplings between cell populations, one definition each for training and evaluation.

* :func:`mmd2`: multi-RBF MMD² — the training loss of :class:`~sciml.perturbation.module.PerturbationFlow`
  (torch, batched, differentiable) and the ``mmd`` metric (:func:`mmd_rbf`, numpy in, float out) are this one
  function, with one bandwidth rule (below);
* :func:`energy_distance`: energy distance (metric);
* :func:`ot_pairing`: exact optimal-transport pairing of two equal-size samples (OT-CFM training batches and
  ``data.pairing: ot``).

**Bandwidth rule** (median heuristic, Gretton et al. 2012; scales of scDFM). With ``z = x ∪ y`` pooled and
``m`` the median of ``‖z_i − z_j‖²`` over the pairs ``i < j`` of distinct points (the mean of the two middle
values when their number is even, as :func:`numpy.median`), detached from the graph, and ``m = 1`` when it is 0,
the kernel is the mean over the scales ``s``::

    k(a, b) = (1/S) Σ_s exp(−‖a − b‖² / (s·m)),      so k(a, a) = 1.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

RBF_SCALES = (0.5, 1.0, 2.0, 4.0)  # bandwidth multipliers s of the median heuristic (scDFM)


def squared_distances(x: Tensor, y: Tensor) -> Tensor:
    """``‖x_i − y_j‖²`` ``(..., n, m)`` for ``x`` ``(..., n, d)``, ``y`` ``(..., m, d)`` (clamped at 0)."""
    d2 = (x * x).sum(-1)[..., :, None] + (y * y).sum(-1)[..., None, :] - 2 * x @ y.transpose(-1, -2)
    return d2.clamp_min(0)


def median_bandwidth(d2: Tensor) -> Tensor:
    """The rule's ``m`` ``(...)`` from the pooled squared distances ``d2`` ``(..., n, n)`` (detached; 0 → 1)."""
    n = d2.shape[-1]
    i, j = torch.triu_indices(n, n, 1, device=d2.device)
    pairs = d2.detach()[..., i, j].sort(-1).values
    k = pairs.shape[-1]
    med = 0.5 * (pairs[..., (k - 1) // 2] + pairs[..., k // 2])
    return torch.where(med > 0, med, torch.ones_like(med))


def mmd2(x: Tensor, y: Tensor, scales: tuple[float, ...] = RBF_SCALES, unbiased: bool = True) -> Tensor:
    r"""Squared MMD with the multi-RBF kernel of the module docstring, batched over leading dims.

    ``MMD² = E k(x, x') + E k(y, y') − 2 E k(x, y)``. ``unbiased=True`` drops the diagonal terms of the first two
    (U-statistic: zero in expectation when ``x, y`` share a law, can be slightly negative); ``unbiased=False`` is
    the V-statistic, ``≥ 0`` always.

    Parameters
    ----------
    x, y : Tensor
        ``(..., n, d)`` and ``(..., m, d)``, ``n, m ≥ 2``.
    scales : tuple of float
        Bandwidth multipliers ``s``.
    unbiased : bool
        U-statistic (``True``) or V-statistic.

    Returns
    -------
    Tensor
        ``(...)``, in the data's squared-kernel units (dimensionless, ``k ≤ 1``).

    """
    n, m = x.shape[-2], y.shape[-2]
    z = torch.cat([x, y], -2)
    d2 = squared_distances(z, z)
    bandwidth = median_bandwidth(d2)[..., None, None]
    k = sum(torch.exp(-d2 / (s * bandwidth)) for s in scales) / len(scales)
    kxx, kyy, kxy = k[..., :n, :n], k[..., n:, n:], k[..., :n, n:]
    if unbiased:
        sxx = (kxx.sum((-1, -2)) - kxx.diagonal(dim1=-2, dim2=-1).sum(-1)) / (n * (n - 1))
        syy = (kyy.sum((-1, -2)) - kyy.diagonal(dim1=-2, dim2=-1).sum(-1)) / (m * (m - 1))
    else:
        sxx, syy = kxx.mean((-1, -2)), kyy.mean((-1, -2))
    return sxx + syy - 2 * kxy.mean((-1, -2))


def _float64(a: np.ndarray) -> Tensor:
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


def mmd_rbf(x: np.ndarray, y: np.ndarray, scales: tuple[float, ...] = RBF_SCALES) -> float:
    """The ``mmd`` metric: unbiased :func:`mmd2` of samples ``x`` ``(n, G)`` and ``y`` ``(m, G)``, in float64."""
    return float(mmd2(_float64(x), _float64(y), tuple(scales)))


def subsample(x: np.ndarray, n_max: int, rng: np.random.Generator) -> np.ndarray:
    """At most ``n_max`` rows of ``x`` (without replacement), as float64."""
    x = np.asarray(x, dtype=np.float64)
    return x[rng.choice(len(x), n_max, replace=False)] if len(x) > n_max else x


def energy_distance(x: np.ndarray, y: np.ndarray) -> float:
    """Energy distance 2E‖X−Y‖ − E‖X−X'‖ − E‖Y−Y'‖ (Székely & Rizzo 2013), U-statistics within samples.

    Parameters
    ----------
    x : (n, G) array
        First sample (e.g. predicted cells).
    y : (m, G) array
        Second sample (real cells). Unbiased: its expectation is 0 when both come from one distribution.

    """
    x, y = _float64(x), _float64(y)

    def within(a: Tensor) -> Tensor:
        d = squared_distances(a, a).sqrt()
        return (d.sum() - d.diagonal().sum()) / max(len(a) * (len(a) - 1), 1)

    return float(2 * squared_distances(x, y).sqrt().mean() - within(x) - within(y))


def ot_pairing(x0: Tensor, x1: Tensor) -> Tensor:
    """Permutation ``π`` ``(C, N)`` minimising ``Σ_i ‖x0[c, π_i] − x1[c, i]‖²`` per condition ``c``.

    Exact optimal transport between two uniform samples of equal size ``N`` is an assignment problem, solved
    exactly (Jonker–Volgenant, :func:`scipy.optimize.linear_sum_assignment`).

    Parameters
    ----------
    x0, x1 : Tensor
        ``(C, N, G)`` source (e.g. control) and target (perturbed) cells.

    Returns
    -------
    Tensor
        ``(C, N)`` long, on ``x0``'s device: ``x0[c, π[c, i]]`` is paired with ``x1[c, i]``.

    """
    from scipy.optimize import linear_sum_assignment

    cost = squared_distances(x1, x0).detach().cpu().numpy()  # (C, N1, N0)
    perms = [linear_sum_assignment(c)[1] for c in cost]
    return torch.as_tensor(np.stack(perms), device=x0.device)
