"""Score predicted cells with cell-eval, the Virtual Cell Challenge's metric suite (optional extra ``sciml[eval]``).

A prediction and the real screen become two AnnData as cell-eval reads them (:func:`screen_anndata`): one obs
column of condition labels (``condition``) holding the control label (``ctrl``) for the control cells, the same
genes in the same order, log1p values in ``X``. cell-eval refuses negative values, so predicted cells are clipped at
0 (what a log1p value cannot go below; a baseline that shifts control cells by an effect can go below it). Both
carry the same control cells (the real ones, as ``sciml perturbation predict`` writes them), so the differences are
the perturbed cells'. :func:`score` runs cell-eval's ``full`` profile (less ``clustering_agreement``, which needs a
clustering of the predicted cells) on them: per condition, perturbation discrimination
(``discrimination_score_l1/l2/cosine``), DE agreement computed by cell-eval itself with pdex (``overlap_at_N``,
``precision_at_N``, ``de_direction_match``, ``de_spearman_*``, ``pr_auc``, ``roc_auc``...), ``pearson_delta``,
``mae``, ``mse`` (and of the deltas) and ``pearson_edistance`` (one value for the whole set). Conditions of several
cell types are scored one cell type at a time, each against its own control cells, and their rows pooled.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sciml.perturbation.data.table import split_key

SKIP = ("clustering_agreement",)
"""Metrics of the ``full`` profile left out: a clustering of the predicted cells is not what is compared here."""
MAX_CONTROL_CELLS = 2000  # control cells written to both files (a seeded draw beyond; bounds the DE's cost)


def screen_anndata(cells: dict[str, np.ndarray], ctrl: np.ndarray, genes: Sequence[str], control_label: str = "ctrl",
                   pert_col: str = "condition"):
    """AnnData of the cells of each condition ``(n_c, G)`` (``cells``; keys used as labels), then ``ctrl`` ``(m, G)``.

    ``obs[pert_col]`` holds the labels and ``control_label`` for the control cells; ``X`` float32 log1p, clipped
    at 0.
    """
    import anndata as ad
    import pandas as pd

    labels = [label for label, x in cells.items() for _ in range(len(x))] + [control_label] * len(ctrl)
    x = np.concatenate([*(np.asarray(v, np.float32) for v in cells.values()), np.asarray(ctrl, np.float32)])
    np.maximum(x, 0.0, out=x)
    obs = pd.DataFrame({pert_col: pd.Categorical(labels)}, index=[f"cell{i}" for i in range(len(labels))])
    return ad.AnnData(x, obs=obs, var=pd.DataFrame(index=[str(g) for g in genes]))


def score(pred: dict[str, np.ndarray], real: dict[str, np.ndarray], ctrl: np.ndarray, genes: Sequence[str],
          threads: int = 1, profile: str = "full", skip: Sequence[str] = SKIP) -> dict:
    """cell-eval's metrics of predicted cells ``pred`` against ``real`` (both ``label -> (n, G)``), one control set.

    Returns ``{"per_condition": [row per label], "mean": {metric: mean over labels}}`` (metrics NaN-free means;
    a metric cell-eval could not compute for a label is left out of that label's row).
    """
    from cell_eval import MetricsEvaluator

    if set(pred) != set(real):
        raise ValueError(f"prediction and real screen name different conditions: {sorted(set(pred) ^ set(real))}")
    order = sorted(real)
    a = screen_anndata({k: pred[k] for k in order}, ctrl, genes)
    b = screen_anndata({k: real[k] for k in order}, ctrl, genes)
    quiet = logging.getLogger("cell_eval")
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        with tempfile.TemporaryDirectory(prefix="cell-eval-") as scratch:
            evaluator = MetricsEvaluator(adata_pred=a, adata_real=b, control_pert="ctrl", pert_col="condition",
                                         num_threads=threads, outdir=str(Path(scratch) / "out"))
            results, _ = evaluator.compute(profile=profile, skip_metrics=list(skip), write_csv=False)
    finally:
        quiet.setLevel(level)
    rows = [{k: v for k, v in row.items() if v is not None and not (isinstance(v, float) and np.isnan(v))}
            for row in results.to_dicts()]
    return {"per_condition": rows, "mean": _means(rows)}


def score_split(pred: dict[str, np.ndarray], dm, split: str = "test", threads: int = 1, seed: int = 0,
                max_control_cells: int = MAX_CONTROL_CELLS) -> dict:
    """:func:`score` of predicted cells of the conditions of ``dm.conditions[split]`` against their real cells.

    Conditions are grouped by cell type, each scored against its own control cells (at most ``max_control_cells``,
    a draw seeded by ``seed``); labels are the canonical ones, with ``@cell type`` when there are several.
    """
    groups: dict[str, list[str]] = {}
    for key in dm.conditions[split]:
        groups.setdefault(split_key(key)[1], []).append(key)
    rows = []
    for cell_type, keys in sorted(groups.items()):
        ctrl = dm.control_matrix(keys[0])
        if len(ctrl) > max_control_cells:
            ctrl = ctrl[np.sort(np.random.default_rng(seed).choice(len(ctrl), max_control_cells, replace=False))]
        label = {k: split_key(k)[0] for k in keys}
        out = score({label[k]: pred[k] for k in keys}, {label[k]: dm.cells(k) for k in keys}, ctrl, dm.genes,
                    threads)
        suffix = f"@{cell_type}" if len(groups) > 1 and cell_type else ""
        rows += [r | {"perturbation": f"{r['perturbation']}{suffix}"} for r in out["per_condition"]]
    return {"per_condition": rows, "mean": _means(rows)}


def _means(rows: list[dict]) -> dict[str, float]:
    """Mean of each numeric metric over the rows that have it."""
    names = dict.fromkeys(k for row in rows for k, v in row.items()
                          if isinstance(v, int | float) and k != "perturbation")
    return {k: float(np.mean([row[k] for row in rows if k in row])) for k in names}
