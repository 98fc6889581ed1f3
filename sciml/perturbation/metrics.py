"""Perturbation metrics, measured against real cells and real control cells, per condition.

Per condition c with real cells X_c, real control cells X_0 (same cell type) and a prediction (mean (G,) or cells
(n, G)): Δ_true = mean(X_c) − mean(X_0), Δ_pred = pred_mean − mean(X_0).

- ``pearson_delta`` / ``pearson_delta_de``: Pearson(Δ_pred, Δ_true) on all genes / the top-20 DE genes;
- ``mse``, ``mae`` (all genes), ``mse_de``: errors of the means;
- ``discrimination``: 1 − (number of other conditions of the split whose Δ_true is closer in L2 to Δ_pred than
  c's own) / (n − 1); 1 = best, 0.5 ≈ chance;
- ``de_overlap``: |top-k DE(pred) ∩ top-k DE(true)| / k, DE genes ranked by |Welch t| against control (true) and
  by |Δ_pred| (prediction);
- ``energy``, ``mmd``: energy distance and multi-RBF MMD² between predicted and real cells (cell predictions only);
- ``interaction_pearson`` (doubles whose singles have cells): Pearson of predicted and real interaction
  ε = μ_ab − μ_a − μ_b + μ_0 (μ: real means of the singles; NaN for an exactly additive prediction), and
  ``interaction_norm`` ‖ε_real‖ (the squared error of ε equals the MSE of the means, so it is not repeated).
  Under masking epistasis ε anti-correlates with Δ_a + Δ_b, so even no-change gets a positive value: compare
  models with each other on it, not with 0;
- noise ceiling (:func:`noise_ceiling`): the same metrics with half of the real cells predicting the other half.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sciml.perturbation.distances import energy_distance, mmd_rbf, subsample

TOP_DE = 20
MAX_CELLS = 300  # cells per population in distribution metrics (subsampled, seeded)


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation; NaN when either vector is constant."""
    a, b = np.asarray(a, np.float64) - np.mean(a), np.asarray(b, np.float64) - np.mean(b)
    den = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / den) if den > 1e-12 else float("nan")


def de_genes(cells: np.ndarray, ctrl: np.ndarray, k: int = TOP_DE) -> np.ndarray:
    """Indices of the k genes with the largest |Welch t| between ``cells`` and ``ctrl`` (ties by index)."""
    diff = cells.mean(0) - ctrl.mean(0)
    se = np.sqrt(cells.var(0, ddof=1) / len(cells) + ctrl.var(0, ddof=1) / len(ctrl)) + 1e-8
    return np.argsort(-np.abs(diff / se), kind="stable")[:k]


def condition_metrics(pred: np.ndarray, real: np.ndarray, ctrl: np.ndarray, rng: np.random.Generator,
                      k: int = TOP_DE) -> dict:
    """Metrics of one condition; ``pred`` is a mean (G,) or predicted cells (n, G)."""
    pred = np.asarray(pred, np.float64)
    pred_mean = pred.mean(0) if pred.ndim == 2 else pred
    ctrl_mean, true_mean = ctrl.mean(0), real.mean(0)
    d_pred, d_true = pred_mean - ctrl_mean, true_mean - ctrl_mean
    de = de_genes(real, ctrl, k)
    k = len(de)
    out = {"pearson_delta": pearson(d_pred, d_true), "pearson_delta_de": pearson(d_pred[de], d_true[de]),
           "mse": float(np.mean((pred_mean - true_mean) ** 2)), "mae": float(np.mean(np.abs(pred_mean - true_mean))),
           "mse_de": float(np.mean((pred_mean[de] - true_mean[de]) ** 2)),
           "de_overlap": len(set(de) & set(np.argsort(-np.abs(d_pred), kind="stable")[:k])) / max(k, 1),
           "energy": float("nan"), "mmd": float("nan")}
    if pred.ndim == 2:
        a, b = subsample(pred, MAX_CELLS, rng), subsample(real, MAX_CELLS, rng)
        out["energy"], out["mmd"] = energy_distance(a, b), mmd_rbf(a, b)
    return out


def discrimination(pred_delta: dict[str, np.ndarray], true_delta: dict[str, np.ndarray]) -> dict[str, float]:
    """Normalised rank of each condition's own Δ_true among all Δ_true by L2 distance to its Δ_pred (1 = best)."""
    keys = list(pred_delta)
    truth = np.stack([true_delta[k] for k in keys])
    out = {}
    for i, key in enumerate(keys):
        dist = np.linalg.norm(truth - pred_delta[key], axis=1)
        out[key] = 1.0 - float((dist < dist[i]).sum()) / max(len(keys) - 1, 1)
    return out


def _interaction(dm, key: str, pred_mean: np.ndarray, ctrl_mean: np.ndarray) -> dict:
    from sciml.perturbation.data.conditions import format_condition
    from sciml.perturbation.data.table import make_key, split_key

    genes, cell_type = dm.perturbation(key), split_key(key)[1]
    singles = [make_key(format_condition([g]), cell_type) for g in genes]
    if len(genes) != 2 or any(s not in dm.table.index for s in singles):
        return {}
    base = sum(dm.cells(s).mean(0) for s in singles) - ctrl_mean
    eps_true, eps_pred = dm.cells(key).mean(0) - base, pred_mean - base
    return {"interaction_pearson": pearson(eps_pred, eps_true),
            "interaction_norm": float(np.linalg.norm(eps_true))}


def evaluate(pred_by_condition: dict, dm, split: str = "test", seed: int = 0, k: int = TOP_DE,
             truth: dict | None = None) -> pd.DataFrame:
    """Per-condition metrics of predictions for the conditions of ``split``.

    Parameters
    ----------
    pred_by_condition : dict condition -> (G,) predicted mean or (n, G) predicted cells
        Must cover every condition of ``dm.conditions[split]``.
    dm : PerturbationDataModule
        A set-up :class:`~sciml.perturbation.data.datamodule.PerturbationDataModule` (real cells and controls).
    split : str
        ``train``, ``val``, ``calib`` or ``test``.
    seed : int
        Seed of the subsampling for distribution metrics.
    k : int
        Number of top DE genes.
    truth : dict or None
        :func:`sciml.perturbation.sim.simulate.read_ground_truth` output; adds ``interacting`` (‖ε‖ above the noise
        floor).

    Returns
    -------
    pandas.DataFrame
        One row per condition: ``condition``, ``category`` and the metrics of the module docstring.

    """
    keys = list(dm.conditions[split])
    missing = [c for c in keys if c not in pred_by_condition]
    if missing:
        raise KeyError(f"no prediction for {len(missing)} {split} conditions, e.g. {missing[:3]}")
    rng = np.random.default_rng(seed)
    rows, pred_delta, true_delta = [], {}, {}
    for key in keys:
        pred, real, ctrl = np.asarray(pred_by_condition[key]), dm.cells(key), dm.control_matrix(key)
        row = {"condition": key, "category": dm.split_category.get(key, ""), "n_cells": len(real)}
        row |= condition_metrics(pred, real, ctrl, rng, k)
        pred_mean = pred.mean(0) if pred.ndim == 2 else pred
        row |= _interaction(dm, key, pred_mean, ctrl.mean(0))
        if truth is not None and key in truth.get("noise_floor", {}):
            row["interacting"] = bool(np.linalg.norm(truth["interaction"][key]) > truth["noise_floor"][key])
        pred_delta[key], true_delta[key] = pred_mean - ctrl.mean(0), real.mean(0) - ctrl.mean(0)
        rows.append(row)
    disc = discrimination(pred_delta, true_delta)
    for row in rows:
        row["discrimination"] = disc[row["condition"]]
    return pd.DataFrame(rows)


def noise_ceiling(dm, split: str = "test", seed: int = 0, k: int = TOP_DE) -> pd.DataFrame:
    """Metrics of half the real cells of each condition (as prediction) against the other half (as truth)."""
    rng = np.random.default_rng(seed)
    rows = []
    for key in dm.conditions[split]:
        real, ctrl = dm.cells(key), dm.control_matrix(key)
        perm = rng.permutation(len(real))
        half_a, half_b = real[perm[: len(real) // 2]], real[perm[len(real) // 2:]]
        row = {"condition": key, "category": dm.split_category.get(key, ""), "n_cells": len(real)}
        rows.append(row | condition_metrics(half_a, half_b, ctrl, rng, k))
    return pd.DataFrame(rows)


def summarise(df: pd.DataFrame, by: str = "category") -> pd.DataFrame:
    """Mean of every numeric metric per ``by`` group, plus an ``all`` row."""
    numeric = df.select_dtypes("number").drop(columns=["n_cells"], errors="ignore")
    table = numeric.groupby(df[by]).mean()
    table.loc["all"] = numeric.mean()
    table["n_conditions"] = list(df[by].value_counts().reindex(table.index[:-1]).fillna(0).astype(int)) + [len(df)]
    return table


def baseline_predictions(model, dm, split: str = "test", n_cells: int | None = None, seed: int = 0) -> dict:
    """Predicted cells of a fitted baseline for each condition of ``split``: its ``sample`` on real control cells."""
    rng = np.random.default_rng(seed)
    out = {}
    for key in dm.conditions[split]:
        ctrl = dm.control_matrix(key)
        if n_cells is not None:
            ctrl = ctrl[rng.choice(len(ctrl), n_cells, replace=n_cells > len(ctrl))]
        out[key] = model.sample(key, ctrl)
    return out
