"""Write generated cells and per-condition effects with bands to an AnnData file (atomically)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sciml.perturbation.data.table import ControlCells

BAND = "simultaneous over genes: split-conformal sup-norm box over held-out calibration conditions"


def to_anndata(result: dict, genes: list[str], info: dict, controls: ControlCells | None = None, *,
               include_controls: bool = True, condition_key: str = "condition", control_label: str = "ctrl",
               given: list[str] | None = None, seed: int = 0):
    """AnnData of the generated cells (then the control cells), scored by cell-eval as written.

    Rows: the generated cells of each condition (``gen0``...), then, when ``controls`` are given and
    ``include_controls``, the control cells (``ctrl0``...) as read. ``X`` is log1p (float32);
    ``layers['counts']`` integer counts (CSR int32): the controls' own when their file has a counts layer, otherwise
    ``Poisson(expm1(x) · k)`` with ``k`` a control cell's counts per normalised unit
    (:mod:`sciml.perturbation.counts`; ``k = 1`` without control counts), seeded by ``seed``. ``obs['condition']``
    holds canonical GEARS labels (control cells: ``ctrl``, or ``control_label`` when ``condition_key`` is
    ``condition``); ``obs[condition_key]``, when another column, the labels as ``given`` (default: canonical) and
    ``control_label`` for control cells.

    ``uns['perturbation_effects']`` holds ``conditions`` ``(C,)``, ``effect``/``lower``/``upper`` ``(C, G)``
    (columns in ``var_names`` order; NaN bands when the model has no calibrator), ``alpha``, ``threshold``,
    ``notes``, ``band``, ``n_calib`` (calibration conditions), ``domain_pvalue`` ``(C,)`` (NaN without
    ``domain.json``), ``in_domain`` ``(C,)`` bool (a flagged condition's band carries no guarantee; its note says
    so) and ``domain_beta``; ``uns['perturbation_predict']`` holds ``info``
    (model, control file, pairing...) and how the control cells and counts were written.
    """
    import pandas as pd
    from scipy import sparse

    from sciml.core.optional import require
    from sciml.perturbation.counts import library_scales, sample_counts

    ad = require("anndata")  # a core dependency: missing only in a broken install

    cells = result["cells"]
    c, n, g = cells.shape
    x = np.asarray(cells.reshape(c * n, g), dtype=np.float32)  # a view of float32 cells, not a copy
    conditions = list(result["conditions"])
    given = conditions if given is None else [str(label) for label in given]
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1,)))  # apart from the cells' draws
    scales = library_scales(controls.x, controls.counts) if controls is not None else np.ones(1)
    counts, _ = sample_counts(x, scales, rng)
    n_ctrl = len(controls.x) if controls is not None and include_controls else 0
    ctrl_gears = control_label if condition_key == "condition" else "ctrl"
    names = [f"gen{i}" for i in range(c * n)] + [f"ctrl{i}" for i in range(n_ctrl)]
    obs = pd.DataFrame({"condition": _labels(conditions, n, ctrl_gears, n_ctrl)}, index=names)
    if condition_key != "condition":
        obs[condition_key] = _labels(given, n, control_label, n_ctrl)
    if n_ctrl:
        x = np.concatenate([x, controls.x.astype(np.float32)])
        own = (sparse.csr_matrix(controls.counts.astype(np.int32)) if controls.counts is not None
               else sample_counts(controls.x, np.ones(1), rng)[0])
        counts = sparse.vstack([counts, own], format="csr")
    adata = ad.AnnData(X=x, obs=obs, var=pd.DataFrame(index=list(genes)), layers={"counts": counts})
    adata.uns["perturbation_effects"] = {
        "conditions": np.asarray(result["conditions"], dtype=str), "notes": np.asarray(result["notes"], dtype=str),
        "effect": result["effect"].astype(np.float32), "lower": np.asarray(result["lower"], np.float32),
        "upper": np.asarray(result["upper"], np.float32), "threshold": float(result["threshold"]),
        "alpha": float("nan") if result["alpha"] is None else float(result["alpha"]), "band": BAND,
        "n_calib": int(result.get("n_calib", 0)),
        "domain_pvalue": np.asarray(result.get("domain_pvalue", np.full(c, np.nan)), np.float64),
        "in_domain": np.asarray(result.get("in_domain", np.ones(c, bool)), bool),
        "domain_beta": float(result.get("beta", float("nan"))),
        "unit": "log1p expression, generated mean minus control mean"}
    source = (f"layers[{controls.counts_layer!r}] of the control file" if controls is not None
              and controls.counts is not None else "none: library size = the target sum")
    adata.uns["perturbation_predict"] = {
        **{k: (str(v) if isinstance(v, Path) else v) for k, v in info.items()}, "condition_key": condition_key,
        "control_label": control_label, "n_control_cells_written": n_ctrl, "counts_seed": seed,
        "counts": "generated cells: Poisson(expm1(X) * k), k = counts per normalised unit of a control cell drawn "
                  f"at random (control counts: {source}); control cells: their own counts, else sampled alike"}
    return adata


def _labels(conditions: list[str], n: int, control: str, n_ctrl: int):
    """Categorical labels: ``n`` cells of each condition, then ``n_ctrl`` control cells."""
    import pandas as pd

    tail = [control] if n_ctrl else []
    return pd.Categorical([*np.repeat(np.asarray(conditions, dtype=object), n), *tail * n_ctrl],
                          categories=list(dict.fromkeys([*conditions, *tail])))


def write_prediction(result: dict, genes: list[str], info: dict, path: str | Path,
                     controls: ControlCells | None = None, **layout) -> Path:
    """Write :func:`to_anndata` (``layout``: its keyword arguments) to ``path`` atomically (``.h5ad``)."""
    from sciml.perturbation.data.anndata_io import write_h5ad

    return write_h5ad(to_anndata(result, genes, info, controls, **layout), path)
