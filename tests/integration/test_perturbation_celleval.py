"""cell-eval (the Virtual Cell Challenge's metric suite) scores ``sciml perturbation predict`` output as written.

Its contract: real and predicted AnnData with the same genes in the same order, the same perturbation labels in one
obs column (``pert_col``) including the control label (``control_pert``) in both, and log1p values or integer
counts in ``X``. Skipped without ``pip install "sciml[eval]"``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sciml.cli.main import main

cell_eval = pytest.importorskip("cell_eval")
ad = pytest.importorskip("anndata")
pd = pytest.importorskip("pandas")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_CONTROL = ROOT / "examples" / "cells" / "grn_control.h5ad"
METRICS = ["pearson_delta", "mae", "mse", "overlap_at_N", "precision_at_N", "de_direction_match",
           "discrimination_score_l1"]


def _real(pred, ctrl, rng: np.random.Generator):
    """A hand-made "real" screen: the controls, and 60 cells per condition shifted by its effect, with noise."""
    xs, labels = [np.asarray(ctrl.X)], ["ctrl"] * ctrl.n_obs
    eff = pred.uns["perturbation_effects"]
    for label, effect in zip(eff["conditions"], eff["effect"], strict=True):
        base = np.asarray(ctrl.X)[rng.integers(ctrl.n_obs, size=60)]
        xs.append(np.clip(base + effect + rng.normal(0, 0.1, base.shape), 0, None))
        labels += [str(label)] * 60
    obs = pd.DataFrame({"condition": labels}, index=[f"real{i}" for i in range(len(labels))])
    return ad.AnnData(np.concatenate(xs).astype(np.float32), obs=obs, var=pred.var.copy())


def _score(pred, real, outdir):
    from cell_eval import MetricsEvaluator

    evaluator = MetricsEvaluator(adata_pred=pred, adata_real=real, control_pert="ctrl", pert_col="condition",
                                 num_threads=1, outdir=str(outdir))
    results, agg = evaluator.compute(profile="full", skip_metrics=["clustering_agreement"], write_csv=False)
    return results, agg.filter(agg["statistic"] == "mean").to_dicts()[0]


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("celleval")
    assert main(["perturbation", "predict", "--control", str(EXAMPLE_CONTROL), "--perturbations", "G001+G002,G003",
                 "--n-cells", "40", "--output", str(tmp / "pred.h5ad")]) == 0
    pred, ctrl = ad.read_h5ad(tmp / "pred.h5ad"), ad.read_h5ad(EXAMPLE_CONTROL)
    return tmp, pred, _real(pred, ctrl, np.random.default_rng(0))


def test_cell_eval_scores_the_log1p_output_as_written(scored):
    tmp, pred, real = scored
    results, mean = _score(pred, real, tmp / "log1p")
    assert sorted(results["perturbation"].to_list()) == ["G001+G002", "G003+ctrl"]
    assert all(np.isfinite(mean[m]) for m in METRICS), mean
    assert mean["pearson_delta"] > 0.9  # the real effects are the predicted ones plus noise


def test_cell_eval_scores_the_counts_layer(scored):
    """The challenge scores raw counts: cell-eval normalises integer X itself (normalize_total, log1p)."""
    tmp, pred, real = scored
    counts = ad.AnnData(pred.layers["counts"].astype(np.float32), obs=pred.obs.copy(), var=pred.var.copy())
    rng = np.random.default_rng(1)
    real_counts = ad.AnnData(rng.poisson(np.expm1(np.asarray(real.X, np.float64))).astype(np.float32),
                             obs=real.obs.copy(), var=real.var.copy())
    _, mean = _score(counts, real_counts, tmp / "counts")
    assert all(np.isfinite(mean[m]) for m in METRICS), mean
    assert mean["pearson_delta"] > 0.9


def test_score_split_ranks_the_additive_baseline_above_no_change(tmp_path):
    """The benchmark's scoring (:func:`sciml.perturbation.celleval.score_split`) of baselines on held-out doubles."""
    from sciml.perturbation.baselines.simple import fit_baselines
    from sciml.perturbation.celleval import score_split
    from sciml.perturbation.data.anndata_io import write_h5ad
    from sciml.perturbation.data.datamodule import PerturbationDataModule
    from sciml.perturbation.metrics import baseline_predictions
    from sciml.perturbation.sim.simulate import simulate

    sim = dict(seed=0, n_genes=30, n_masters=4, n_regulators=10, n_singles=8, n_doubles=12, cells_per_condition=60,
               control_cells=200)
    dm = PerturbationDataModule(str(write_h5ad(simulate(sim), tmp_path / "sim.h5ad")),
                                split={"kind": "combo_seen2", "seed": 0})
    dm.setup()
    scores = {name: score_split(baseline_predictions(model, dm, "test", 60, 0), dm, "test", max_control_cells=150)
              for name, model in fit_baselines(dm, ("no_change", "additive")).items()}
    labels = sorted(row["perturbation"] for row in scores["additive"]["per_condition"])
    assert labels == sorted(dm.conditions["test"])
    add, none = scores["additive"]["mean"], scores["no_change"]["mean"]
    assert all(np.isfinite(add[m]) for m in METRICS), add
    assert add["pearson_delta"] > none["pearson_delta"] and add["mae"] < none["mae"]
    assert add["overlap_at_N"] > none["overlap_at_N"] == 0.0  # no change: no DE gene
