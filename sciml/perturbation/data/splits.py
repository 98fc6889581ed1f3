"""Seeded condition-level splits for perturbation data (GEARS-style), written as JSON next to the run.

Every kind returns train / val / calib / test lists of condition keys (the calibration split is never used for
early stopping, docs/design.md §3), an ``excluded`` list, and a category per condition:

- ``unseen_single``: a share of the single-perturbation *genes* is held out; every condition touching a held-out
  gene leaves training (so no held-out gene is ever seen perturbed in training);
- ``combo_seen0`` / ``combo_seen1``: held-out genes as above; held-out doubles are those with exactly 0 / 1 gene
  seen in training singles; the other doubles touching held-out genes are excluded (GEARS, Roohani et al. 2023);
- ``combo_seen2`` (alias ``additive``): every single in training; a share of the doubles whose two singles are both
  in the data is held out (the setting of Ahlmann-Eltze et al. 2025's additive baseline);
- ``by_cell_type``: one cell type's perturbations are held out (its control cells stay available).

Categories: ``single`` (in train), ``unseen_single``, ``double_seen{k}`` (k = genes of the double whose single is
in train).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sciml.core.io.atomic import atomic_write_text
from sciml.core.splits import SPLIT_NAMES

HELDOUT = ("val", "calib", "test")
KINDS = ("unseen_single", "combo_seen0", "combo_seen1", "combo_seen2", "additive", "by_cell_type")


def _deal(units: Sequence, fractions: Sequence[float], rng: np.random.Generator) -> dict[str, list]:
    """Shuffle ``units`` and deal them to val / calib / test by ``fractions`` (each non-empty when possible)."""
    units = [units[i] for i in rng.permutation(len(units))]
    n = len(units)
    counts = np.floor(np.asarray(fractions, float) / np.sum(fractions) * n).astype(int)
    counts = np.maximum(counts, 1) if n >= 3 else counts
    while counts.sum() > n:
        counts[np.argmax(counts)] -= 1
    for i in range(n - counts.sum()):  # remainder: test, calib, val, test, ...
        counts[2 - i % 3] += 1
    bounds = np.cumsum(counts)[:-1]
    return {name: list(part) for name, part in zip(HELDOUT, np.split(np.array(units, dtype=object), bounds),
                                                   strict=True)}


def _n_held(n: int, holdout: float) -> int:
    return int(min(n, max(min(3, n), round(holdout * n))))


def categories(conditions: dict[str, tuple], train: Sequence[str]) -> dict[str, str]:
    """Category of each non-control condition given the training conditions (see module docstring)."""
    seen = {genes[0] for key, genes in conditions.items() if key in set(train) and len(genes) == 1}
    out = {}
    for key, genes in conditions.items():
        if len(genes) == 1:
            out[key] = "single" if genes[0] in seen else "unseen_single"
        elif len(genes) >= 2:
            out[key] = f"double_seen{sum(g in seen for g in genes)}"
    return out


def _by_genes(conditions: dict[str, tuple], kind: str, holdout: float, fractions, rng) -> dict[str, list]:
    singles = sorted({genes[0] for genes in conditions.values() if len(genes) == 1})
    held = rng.choice(singles, size=_n_held(len(singles), holdout), replace=False).tolist() if singles else []
    dealt = _deal(held, fractions, rng)
    where = {g: name for name in HELDOUT for g in dealt[name]}
    out: dict[str, list] = {name: [] for name in (*SPLIT_NAMES, "excluded")}
    for key, genes in conditions.items():
        spots = [where[g] for g in genes if g in where]
        if not spots:
            out["train"].append(key)
            continue
        n_seen = len(genes) - len(spots)
        if kind in ("combo_seen0", "combo_seen1") and len(genes) >= 2 and n_seen != int(kind[-1]):
            out["excluded"].append(key)
            continue
        out[max(spots, key=HELDOUT.index)].append(key)
    return out


def _by_doubles(conditions: dict[str, tuple], holdout: float, fractions, rng) -> dict[str, list]:
    singles = {genes[0] for genes in conditions.values() if len(genes) == 1}
    eligible = sorted(k for k, g in conditions.items() if len(g) >= 2 and all(x in singles for x in g))
    held = rng.choice(eligible, size=_n_held(len(eligible), holdout), replace=False).tolist() if eligible else []
    out = {"train": [k for k in conditions if k not in set(held)], "excluded": []} | _deal(sorted(held), fractions,
                                                                                           rng)
    return out


def _by_cell_type(conditions: dict[str, tuple], cell_types: dict[str, str], held_type: str | None,
                  fractions, rng) -> dict[str, list]:
    types = sorted(set(cell_types.values()))
    if len(types) < 2:
        raise ValueError(f"split 'by_cell_type' needs >= 2 cell types, found {types}; set data.cell_type_key")
    if held_type is None:
        held_type = types[int(rng.integers(len(types)))]
    if held_type not in types:
        raise ValueError(f"split.holdout_cell_type {held_type!r} is not a cell type of the data ({types})")
    held = sorted(k for k in conditions if cell_types[k] == held_type and conditions[k])
    return {"train": [k for k in conditions if k not in set(held)], "excluded": []} | _deal(held, fractions, rng)


def make_split(conditions: dict[str, tuple], kind: str = "combo_seen2", seed: int = 0, holdout: float = 0.5,
               fractions: Sequence[float] = (0.2, 0.4, 0.4), cell_types: dict[str, str] | None = None,
               holdout_cell_type: str | None = None) -> dict:
    """Split perturbation conditions (control excluded) into train / val / calib / test.

    Parameters
    ----------
    conditions : dict key -> sorted gene tuple
        Non-control conditions (``()`` entries are ignored).
    kind : str
        One of :data:`KINDS`.
    seed : int
        Seed of the ``numpy.random.default_rng`` drawing held-out genes / doubles.
    holdout : float
        Share of eligible units (single genes, eligible doubles) held out of training.
    fractions : 3 floats
        Relative sizes of val, calib, test among the held-out units.
    cell_types, holdout_cell_type
        Cell type of each condition key and the type held out (``by_cell_type`` only; seeded choice if ``None``).

    Returns
    -------
    dict
        ``kind``, ``seed``, ``train``, ``val``, ``calib``, ``test``, ``excluded`` (sorted lists of keys) and
        ``category`` (key -> category).

    """
    if kind not in KINDS:
        raise ValueError(f"split kind {kind!r} unknown; choose one of {list(KINDS)}")
    conditions = {k: tuple(v) for k, v in conditions.items() if len(v)}
    rng = np.random.default_rng(seed)
    if kind in ("combo_seen2", "additive"):
        parts = _by_doubles(conditions, holdout, fractions, rng)
    elif kind == "by_cell_type":
        parts = _by_cell_type(conditions, cell_types or {}, holdout_cell_type, fractions, rng)
    else:
        parts = _by_genes(conditions, kind, holdout, fractions, rng)
    parts = {name: sorted(str(k) for k in parts[name]) for name in (*SPLIT_NAMES, "excluded")}
    empty = [name for name in SPLIT_NAMES if not parts[name]]
    if empty:
        raise ValueError(f"split {kind!r} (seed {seed}) leaves {empty} empty with {len(conditions)} conditions; "
                         f"use a different split kind or more conditions")
    cats = categories({k: conditions[k] for k in conditions if k not in set(parts["excluded"])}, parts["train"])
    return {"kind": kind, "seed": int(seed), **parts, "category": cats}


def write_split(path: str | Path, split: dict) -> Path:
    """Write a split (from :func:`make_split`) as JSON, atomically."""
    atomic_write_text(path, json.dumps(split, indent=1, sort_keys=True))
    return Path(path)


def read_split(path: str | Path) -> dict:
    """Read a split JSON written by :func:`write_split`."""
    return json.loads(Path(path).read_text())
