"""Integer counts for log1p cells, consistent with their means and the control cells' library sizes.

A log1p cell ``x = log1p(c / L · T)`` (``T`` the target sum, ``L`` the library size over the normalised genes)
determines its counts' rates up to the scale ``k = L / T``: ``λ_g = expm1(x_g) · k``. A generated cell has no
library of its own, so it borrows one from a control cell ``j`` drawn at random: ``k_j = Σ_g c_jg / Σ_g expm1(x_jg)``
(counts per normalised unit, over the model's genes; ``L_j / T`` when ``X`` was normalised over those genes), and
``c_g ~ Poisson(expm1(x_g) · k_j)``. Then ``E[c_g] · T / L_j = expm1(x_g)``, so normalising the counts by the
borrowed library recovers the cell's expression on average, and a generated cell whose normalised total is the
controls' has the library size of its control. Without control counts ``k = 1`` (library ``T``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

ROWS_PER_DRAW = 4096  # cells sampled together (bounds the dense rate matrix)


def library_scales(x: np.ndarray, counts: np.ndarray | None = None) -> np.ndarray:
    """Counts per normalised unit ``k_j`` ``(n,)`` of control cells ``x`` ``(n, G)`` log1p with ``counts`` ``(n, G)``.

    Without ``counts`` every ``k_j = 1``. A control cell with no expression (``Σ expm1(x) = 0``) gets the median
    scale of the others.
    """
    if counts is None:
        return np.ones(len(x))
    if counts.shape != x.shape:
        raise ValueError(f"counts {counts.shape} and log1p cells {x.shape} differ in shape")
    total = np.expm1(x).sum(1, dtype=np.float64)  # float32 terms, float64 sums
    scale = np.where(total > 0, counts.sum(1) / np.where(total > 0, total, 1.0), np.nan)
    fill = np.nanmedian(scale) if np.isfinite(scale).any() else 1.0
    return np.where(np.isfinite(scale), scale, fill)


def sample_counts(x: np.ndarray, scales: np.ndarray, rng: np.random.Generator, workers: int | None = None):
    """Counts ``(m, G)`` (scipy CSR, int32) of log1p cells ``x`` ``(m, G)``, and the scale each borrowed ``(m,)``.

    Each cell borrows the scale of a control cell drawn uniformly with replacement (module docstring). Only the
    entries with ``x > 0`` are drawn (a zero rate gives 0), in blocks of :data:`ROWS_PER_DRAW` cells with their own
    generators spawned from ``rng``, on ``workers`` threads (default: torch's CPU threads): the counts do not
    depend on ``workers``.
    """
    import torch
    from scipy import sparse

    borrowed = scales[rng.integers(len(scales), size=len(x))] if len(scales) else np.ones(len(x))
    starts = range(0, len(x), ROWS_PER_DRAW)
    jobs = list(zip(starts, rng.spawn(len(starts)), strict=True))

    def draw(job):
        start, gen = job
        block = x[start:start + ROWS_PER_DRAW]
        flat = np.flatnonzero(block > 0)  # row-major: sorted by cell, then gene
        row, col = np.divmod(flat, block.shape[1])
        counts = gen.poisson(np.expm1(block.ravel()[flat].astype(np.float64)) * borrowed[start + row])
        drawn = counts > 0
        return (counts[drawn].astype(np.int32), col[drawn].astype(np.int32),
                np.bincount(row[drawn], minlength=len(block)))

    with ThreadPoolExecutor(max(1, workers or torch.get_num_threads())) as pool:  # numpy draws without the GIL
        parts = list(pool.map(draw, jobs))
    per_row = np.concatenate([n for *_, n in parts] or [np.zeros(0, np.int64)])
    indptr = np.concatenate([[0], np.cumsum(per_row)]).astype(np.int64)
    data, cols = (np.concatenate([part[i] for part in parts] or [np.zeros(0, np.int32)]) for i in (0, 1))
    return sparse.csr_matrix((data, cols, indptr), shape=x.shape), borrowed
