"""All baselines and the noise ceiling on one split, in one table (for benchmarks beside a model's rows)."""

from __future__ import annotations

import pandas as pd

from sciml.perturbation.baselines.simple import BASELINES, fit_baselines
from sciml.perturbation.metrics import baseline_predictions, evaluate, noise_ceiling


def evaluate_baselines(dm, split: str | tuple[str, ...] = "test", n_cells: int | None = None, seed: int = 0,
                       truth: dict | None = None, names: tuple[str, ...] = tuple(BASELINES)) -> pd.DataFrame:
    """Per-condition metrics of every baseline and of the noise ceiling (columns ``model`` and ``split``).

    Parameters
    ----------
    dm : PerturbationDataModule
        A set-up data module; baselines are fitted once on its training conditions.
    split : str or tuple of str
        Split(s) evaluated (``test`` by default).
    n_cells : int or None
        Control cells shifted per condition by each baseline (``None``: all control cells of the cell type).
    seed : int
        Seed of control-cell draws and distribution-metric subsampling.
    truth : dict or None
        Simulator ground truth (:func:`sciml.perturbation.sim.simulate.read_ground_truth`), adds ``interacting``.
    names : tuple of str
        Baselines to run (keys of :data:`~sciml.perturbation.baselines.simple.BASELINES` or, slower,
        :data:`~sciml.perturbation.baselines.simple.TRAINED`).

    """
    splits = (split,) if isinstance(split, str) else tuple(split)
    frames = []
    for name, model in fit_baselines(dm, names).items():
        for part in splits:
            preds = baseline_predictions(model, dm, part, n_cells, seed)
            frames.append(evaluate(preds, dm, part, seed, truth=truth).assign(model=name, split=part))
    for part in splits:
        frames.append(noise_ceiling(dm, part, seed).assign(model="noise_ceiling", split=part))
    return pd.concat(frames, ignore_index=True)


def simulator_baselines(seeds: tuple[int, ...] = (0, 1, 2), names: tuple[str, ...] = tuple(BASELINES),
                        split: dict | None = None, workdir: str = "runs/cells_baselines") -> pd.DataFrame:
    """Baselines on fresh default simulations (one per seed), additive split, test + calib doubles.

    Returns per-condition rows with ``seed``, ``model`` and ``interacting``; see :func:`evaluate_baselines`.
    """
    from pathlib import Path

    from sciml.perturbation.data.anndata_io import write_h5ad
    from sciml.perturbation.data.datamodule import PerturbationDataModule
    from sciml.perturbation.sim.simulate import read_ground_truth, simulate

    frames = []
    for seed in seeds:
        adata = simulate({"seed": seed})
        path = write_h5ad(adata, Path(workdir) / f"sim{seed}.h5ad")
        dm = PerturbationDataModule(str(path), split={"kind": "additive", "seed": seed} | (split or {}))
        dm.setup()
        df = evaluate_baselines(dm, ("test", "calib"), seed=seed, truth=read_ground_truth(adata), names=names)
        frames.append(df.assign(seed=seed))
    return pd.concat(frames, ignore_index=True)


if __name__ == "__main__":  # python -m sciml.perturbation.compare [names...]: baseline table on the simulator
    import sys

    chosen = tuple(sys.argv[1:]) or tuple(BASELINES)
    table = simulator_baselines(names=chosen)
    cols = ["pearson_delta", "pearson_delta_de", "mse", "mse_de", "energy", "mmd", "discrimination"]
    inter = table[table["interacting"].fillna(True).astype(bool)]
    for title, part in (("all held-out doubles", table), ("interacting doubles (‖ε‖ > noise floor)", inter)):
        per_seed = part.groupby(["model", "seed"])[cols].mean()
        print(f"\n{title}: mean over conditions, then mean ± sd over seeds {sorted(set(table['seed']))}")
        print(per_seed.groupby("model").agg(["mean", "std"]).round(3).to_string())
