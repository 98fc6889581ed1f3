"""All baselines and the noise ceiling on one split, in one table (for benchmarks beside a model's rows)."""

from __future__ import annotations

import pandas as pd

from sciml.cells.baselines import BASELINES, fit_baselines
from sciml.cells.metrics import baseline_predictions, evaluate, noise_ceiling


def evaluate_baselines(dm, split: str = "test", n_cells: int | None = None, seed: int = 0,
                       truth: dict | None = None, names: tuple[str, ...] = tuple(BASELINES)) -> pd.DataFrame:
    """Per-condition metrics of every baseline and of the noise ceiling (column ``model``).

    Parameters
    ----------
    dm : PerturbationDataModule
        A set-up data module; baselines are fitted on its training conditions.
    split : str
        Conditions evaluated (``test`` by default).
    n_cells : int or None
        Control cells shifted per condition by each baseline (``None``: all control cells of the cell type).
    seed : int
        Seed of control-cell draws and distribution-metric subsampling.
    truth : dict or None
        Simulator ground truth (:func:`sciml.cells.simulate.read_ground_truth`), adds ``interacting``.
    names : tuple of str
        Baselines to run (keys of :data:`~sciml.cells.baselines.BASELINES` or, slower,
        :data:`~sciml.cells.baselines.TRAINED`).

    """
    frames = []
    for name, model in fit_baselines(dm, names).items():
        preds = baseline_predictions(model, dm, split, n_cells, seed)
        frames.append(evaluate(preds, dm, split, seed, truth=truth).assign(model=name))
    frames.append(noise_ceiling(dm, split, seed).assign(model="noise_ceiling"))
    return pd.concat(frames, ignore_index=True)
