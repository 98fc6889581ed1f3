"""Control-cell pairing for perturbation batches.

``random``: N control cells drawn independently of the N perturbed cells (scDFM: no cell-level pairing).
``ot``: the same draw, re-ordered by exact minibatch optimal transport (squared Euclidean cost, uniform weights),
so that ``x_ctrl[i]`` is the control cell transported to ``x_pert[i]`` (Tong et al. 2024, OT-CFM).
"""

from __future__ import annotations

import numpy as np
import torch

from sciml.perturbation.distances import ot_pairing

PAIRINGS = ("random", "ot")


def draw(n_available: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` row indices out of ``n_available``: without replacement when possible, with replacement otherwise."""
    return rng.choice(n_available, size=n, replace=n > n_available)


def ot_order(x_ctrl: np.ndarray, x_pert: np.ndarray) -> np.ndarray:
    """Permutation ``p`` such that ``x_ctrl[p[i]]`` is paired with ``x_pert[i]`` by exact OT.

    The same solver as the training path (:func:`sciml.perturbation.distances.ot_pairing`), in float64.

    Parameters
    ----------
    x_ctrl : (N, G) array
        Control cells.
    x_pert : (N, G) array
        Perturbed cells (same N).

    """
    x0, x1 = (torch.as_tensor(np.asarray(a, dtype=np.float64))[None] for a in (x_ctrl, x_pert))
    return ot_pairing(x0, x1)[0].numpy()


def pair(x_ctrl: np.ndarray, x_pert: np.ndarray, method: str) -> np.ndarray:
    """Return ``x_ctrl`` re-ordered for ``method`` (``random``: unchanged; ``ot``: OT-paired to ``x_pert``)."""
    if method == "random":
        return x_ctrl
    if method == "ot":
        return x_ctrl[ot_order(x_ctrl, x_pert)]
    raise ValueError(f"data.pairing {method!r} unknown; choose one of {list(PAIRINGS)}")
