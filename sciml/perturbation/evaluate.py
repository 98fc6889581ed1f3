"""Predicted and measured mean effects of a data module's conditions, and coverage of the effect bands."""

from __future__ import annotations

import numpy as np
import torch

from sciml.perturbation.data.table import split_key
from sciml.perturbation.model import PerturbationModel
from sciml.perturbation.predict import generate
from sciml.perturbation.uncertainty import EffectBands


def split_predictions(module: PerturbationModel, dm, split: str, n_cells: int = 128, seed: int = 0,
                      steps: int | None = None, method: str | None = None) -> dict[str, np.ndarray]:
    """Generated cells ``(n_cells, G)`` per condition of ``dm.conditions[split]``, from that condition's controls.

    Conditions sharing a control population (cell type) are generated together, in batches of conditions.
    """
    groups: dict[str, list[str]] = {}
    for key in dm.conditions[split]:
        groups.setdefault(split_key(dm.key(key))[1], []).append(key)
    out = {}
    for keys in groups.values():
        cells = generate(module, dm.control_matrix(keys[0]), [dm.encode(k) for k in keys], n_cells, seed, steps,
                         method)
        out |= dict(zip(keys, cells, strict=True))
    return {key: out[key] for key in dm.conditions[split]}


def effects(cells: dict[str, np.ndarray], dm) -> tuple[torch.Tensor, torch.Tensor]:
    """Predicted and measured mean effects ``(n, G)`` float64 (each minus the condition's control mean)."""
    pred, true = [], []
    for key, x in cells.items():
        ctrl_mean = dm.control_matrix(key).mean(0)
        pred.append(x.mean(0) - ctrl_mean)
        true.append(dm.cells(key).mean(0) - ctrl_mean)
    return torch.as_tensor(np.stack(pred), dtype=torch.float64), torch.as_tensor(np.stack(true), dtype=torch.float64)


def fit_bands(module: PerturbationModel, dm, alpha: float, n_cells: int = 128, seed: int = 0) -> EffectBands:
    """Effect bands of ``module``: per-gene scale from the **val** conditions, threshold from the **calib** ones.

    Each condition's effect is the mean of ``n_cells`` generated cells minus its control mean (:func:`effects`).
    """
    fit = effects(split_predictions(module, dm, "val", n_cells, seed), dm)
    cal = effects(split_predictions(module, dm, "calib", n_cells, seed), dm)
    return EffectBands.fit(*fit, *cal, alpha=alpha)


def band_metrics(bands: EffectBands, pred: torch.Tensor, true: torch.Tensor, alpha: float | None = None) -> dict:
    """Simultaneous (box) and per-gene coverage and mean half-width of the bands on ``(n, G)`` effects."""
    box = bands.predict_set(pred, alpha)
    inside = (box.lower <= true) & (true <= box.upper)
    return {"coverage_simultaneous": float(inside.all(-1).double().mean()),
            "coverage_per_gene": float(inside.double().mean()),
            "mean_half_width": float(((box.upper - box.lower) / 2).mean()),
            "threshold": bands.threshold(alpha), "n_calib": int(bands.calibrator.n_calib), "n_test": len(pred)}
