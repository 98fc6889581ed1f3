"""Seeded train / val / calib / test splits, written next to the run for reproducibility."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sciml.core.io.atomic import atomic_write_text

SPLIT_NAMES = ("train", "val", "calib", "test")


def random_split(n: int, fractions: Sequence[float], seed: int) -> dict[str, np.ndarray]:
    """Split ``range(n)`` into train/val/calib/test index arrays with a seeded permutation.

    Parameters
    ----------
    n : int
        Number of items.
    fractions : sequence of 4 floats
        Fractions for train, val, calib, test (must sum to 1). The calibration split is never used for
        early stopping (docs/design.md §3).
    seed : int
        Seed of ``numpy.random.default_rng``.

    """
    fractions = np.asarray(fractions, dtype=float)
    if fractions.shape != (4,) or np.any(fractions < 0) or abs(fractions.sum() - 1) > 1e-6:
        raise ValueError(f"split fractions must be 4 non-negative numbers summing to 1, got {list(fractions)}")
    perm = np.random.default_rng(seed).permutation(n)
    bounds = np.round(np.cumsum(fractions) * n).astype(int)
    parts = np.split(perm, bounds[:-1])
    return {name: np.sort(part) for name, part in zip(SPLIT_NAMES, parts, strict=True)}


def group_split(groups: Sequence[str], fractions: Sequence[float], seed: int) -> dict[str, np.ndarray]:
    """Split items by group (e.g. molecule): every item of a group lands in the same split.

    The sorted distinct groups are split with :func:`random_split` (so ``fractions`` are shares of *groups*), and
    each item follows its group. Use it when the model must be judged on groups it never saw in any form.

    Parameters
    ----------
    groups : sequence of str, length n
        Group label of each item.
    fractions, seed
        As in :func:`random_split`.

    Returns
    -------
    dict of split name -> sorted item indices.

    """
    labels = np.asarray([str(g) for g in groups])
    unique = np.unique(labels)
    by_group = random_split(len(unique), fractions, seed)
    return {name: np.sort(np.nonzero(np.isin(labels, unique[idx]))[0]) for name, idx in by_group.items()}


def write_split(path: str | Path, ids: Sequence[str], split: dict[str, np.ndarray], seed: int) -> None:
    """Write the ids of each split as JSON (atomically)."""
    payload = {"seed": seed, **{name: [str(ids[i]) for i in idx] for name, idx in split.items()}}
    atomic_write_text(path, json.dumps(payload, indent=1))
