"""Distances between cell populations: energy distance and multi-RBF MMD (unbiased U-statistics)."""

from __future__ import annotations

import numpy as np

RBF_SCALES = (0.5, 1.0, 2.0, 4.0)  # σ² = s · median pairwise squared distance (scDFM)


def _sq_dists(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    return np.maximum(d, 0.0)


def _offdiag_mean(m: np.ndarray) -> float:
    n = len(m)
    return float((m.sum() - np.trace(m)) / max(n * (n - 1), 1))


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
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    xy = np.sqrt(_sq_dists(x, y)).mean()
    return float(2 * xy - _offdiag_mean(np.sqrt(_sq_dists(x, x))) - _offdiag_mean(np.sqrt(_sq_dists(y, y))))


def mmd_rbf(x: np.ndarray, y: np.ndarray, scales: tuple[float, ...] = RBF_SCALES) -> float:
    """Unbiased MMD² with a mixture of RBF kernels, σ² = s · median pairwise squared distance of x ∪ y.

    Parameters
    ----------
    x : (n, G) array
        First sample.
    y : (m, G) array
        Second sample.
    scales : tuple of float
        Multipliers s of the median heuristic (Gretton et al. 2012; scDFM uses 0.5, 1, 2, 4).

    """
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    dxx, dyy, dxy = _sq_dists(x, x), _sq_dists(y, y), _sq_dists(x, y)
    pooled = np.concatenate([dxx[np.triu_indices(len(x), 1)], dyy[np.triu_indices(len(y), 1)], dxy.ravel()])
    med = float(np.median(pooled)) or 1.0
    total = 0.0
    for s in scales:
        g = 1.0 / (s * med)
        total += _offdiag_mean(np.exp(-g * dxx)) + _offdiag_mean(np.exp(-g * dyy)) - 2 * np.exp(-g * dxy).mean()
    return float(total / len(scales))
