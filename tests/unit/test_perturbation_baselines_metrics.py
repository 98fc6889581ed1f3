import numpy as np
import pytest

pytest.importorskip("anndata")

from sciml.perturbation.baselines.simple import Additive, Linear, NoChange, TrainMean, fit_baselines  # noqa: E402
from sciml.perturbation.data.anndata_io import write_h5ad  # noqa: E402
from sciml.perturbation.data.datamodule import PerturbationDataModule  # noqa: E402
from sciml.perturbation.distances import energy_distance, mmd_rbf  # noqa: E402
from sciml.perturbation.metrics import (  # noqa: E402
    baseline_predictions,
    discrimination,
    evaluate,
    noise_ceiling,
    pearson,
    summarise,
)
from sciml.perturbation.sim.toy import toy_adata  # noqa: E402


@pytest.fixture(scope="module")
def dm(tmp_path_factory):
    path = write_h5ad(toy_adata(n_singles=6, cells=40, seed=2), tmp_path_factory.mktemp("bm") / "toy.h5ad")
    dm = PerturbationDataModule(str(path), split={"kind": "additive", "seed": 0, "holdout": 0.6}, knn=4)
    dm.setup()
    return dm


def real_means(dm, split="test"):
    return {c: dm.cells(c).mean(0) for c in dm.conditions[split]}


def test_additive_exact_on_additive_toy(dm):
    model = Additive().fit(dm)
    for c in dm.conditions["test"]:
        np.testing.assert_allclose(model.predict_mean(c), dm.cells(c).mean(0), atol=1e-4)
    df = evaluate({c: model.predict_mean(c) for c in dm.conditions["test"]}, dm)
    assert (df["pearson_delta"] > 0.9999).all() and (df["mse"] < 1e-8).all() and (df["discrimination"] == 1).all()


def test_simple_baselines(dm):
    c = dm.conditions["test"][0]
    ctrl = dm.control_matrix()
    np.testing.assert_allclose(NoChange().fit(dm).predict_mean(c), ctrl.mean(0), atol=1e-5)
    tm = TrainMean().fit(dm)
    deltas = [dm.cells(k).mean(0) - ctrl.mean(0) for k in dm.conditions["train"]]
    np.testing.assert_allclose(tm.predict_mean(c), ctrl.mean(0) + np.mean(deltas, 0), atol=1e-4)
    shifted = tm.sample(c, ctrl[:5])
    np.testing.assert_allclose(shifted - ctrl[:5], np.broadcast_to(tm.delta(c), (5, len(dm.genes))), atol=1e-5)


def test_linear_model_beats_no_change_and_matches_closed_form(dm):
    lin = Linear(dim=3, ridge=0.1).fit(dm)
    assert lin.g.shape == (len(dm.genes), 3) and lin.k.shape == (3, 3)
    keys = sorted(lin.train_delta)
    y = np.stack([lin.train_delta[k] for k in keys], 1) - lin.b[:, None]
    p = np.stack([lin._embed(k) for k in keys])
    g, lam = lin.g, 0.1 * np.eye(3)
    k = np.linalg.inv(g.T @ g + lam) @ g.T @ y @ p @ np.linalg.inv(p.T @ p + lam)
    np.testing.assert_allclose(lin.k, k, rtol=1e-6, atol=1e-8)
    preds = {n: m for n, m in fit_baselines(dm).items()}
    err = {n: summarise(evaluate(baseline_predictions(m, dm), dm)).loc["all", "mse"] for n, m in preds.items()}
    assert err["linear"] < err["no_change"] and err["additive"] < err["linear"]


def test_perfect_prediction_metrics(dm):
    df = evaluate({c: dm.cells(c) for c in dm.conditions["test"]}, dm)
    assert np.allclose(df["pearson_delta"], 1) and np.allclose(df["pearson_delta_de"], 1)
    assert np.allclose(df["mse"], 0) and np.allclose(df["de_overlap"], 1) and np.allclose(df["discrimination"], 1)
    # identical samples: the U-statistic is -2·mean within-sample distance / n, i.e. 0 up to O(1/n)
    for c, energy in zip(df["condition"], df["energy"], strict=True):
        x = dm.cells(c).astype(np.float64)
        mean_dist = np.linalg.norm(x[:, None] - x[None], axis=-1).sum() / (len(x) * (len(x) - 1))
        assert energy == pytest.approx(-2 * mean_dist / len(x), rel=1e-6)
    # likewise the unbiased MMD² of identical samples is -2·(1 - mean off-diagonal kernel) / n ∈ [-2/n, 0]
    assert ((df["mmd"] <= 0) & (df["mmd"] >= -2 / df["n_cells"])).all()
    assert set(df["category"]) == {"double_seen2"} and np.allclose(df["interaction_pearson"], 1)


def test_energy_and_mmd_sampling_tolerance():
    rng = np.random.default_rng(0)
    n, d = 300, 10
    x, y, z = rng.normal(size=(n, d)), rng.normal(size=(n, d)), rng.normal(size=(n, d)) + 0.5
    scale = np.sqrt(2 * d)  # E‖X − X'‖ for unit Gaussians
    # the U-statistic is unbiased under equal distributions with sd of order E‖X−X'‖ / n
    assert abs(energy_distance(x, y)) < 5 * scale / n
    assert energy_distance(x, z) > 20 * scale / n
    assert abs(mmd_rbf(x, y)) < 0.01 < mmd_rbf(x, z)


def test_discrimination_and_pearson():
    true = {"a": np.array([1.0, 0, 0]), "b": np.array([0, 1.0, 0]), "c": np.array([0, 0, 1.0])}
    assert discrimination(true, true) == {"a": 1.0, "b": 1.0, "c": 1.0}
    swapped = {"a": true["b"], "b": true["a"], "c": true["c"]}
    assert discrimination(swapped, true) == {"a": 0.5, "b": 0.5, "c": 1.0}
    assert np.isnan(pearson(np.ones(3), np.arange(3)))


def test_noise_ceiling_and_missing_predictions(dm):
    ceiling = noise_ceiling(dm)
    assert len(ceiling) == len(dm.conditions["test"]) and (ceiling["pearson_delta"] > 0.95).all()
    with pytest.raises(KeyError, match="no prediction"):
        evaluate({}, dm)


def test_evaluate_baselines_table(dm):
    from sciml.perturbation.compare import evaluate_baselines

    df = evaluate_baselines(dm)  # all control cells: shifted sample means are the predicted means exactly
    assert set(df["model"]) == {"no_change", "train_mean", "additive", "linear", "noise_ceiling"}
    assert set(df["split"]) == {"test"}
    assert (df.groupby("model").size() == len(dm.conditions["test"])).all()
    best = df.groupby("model")["mse"].mean()
    assert best["additive"] < 1e-8 < best["no_change"]


def test_learned_combination_beats_additive_on_interacting_toy(tmp_path):
    from sciml.perturbation.baselines.simple import get_baseline

    adata = toy_adata(n_genes=30, n_singles=8, cells=20, seed=4, interaction=-1.5)
    path = write_h5ad(adata, tmp_path / "inter.h5ad")
    dm = PerturbationDataModule(str(path), split={"kind": "additive", "seed": 0, "holdout": 0.4}, knn=4)
    dm.setup()
    err = {}
    for name in ("additive", "combination"):
        model = get_baseline(name).fit(dm)
        test = dm.conditions["test"]
        err[name] = np.mean([np.mean((model.predict_mean(c) - dm.cells(c).mean(0)) ** 2) for c in test])
    assert err["combination"] < 0.5 * err["additive"]
    single = next(c for c in dm.conditions["train"] if len(dm.perturbation(c)) == 1)
    np.testing.assert_allclose(get_baseline("combination").fit(dm).delta(single), Additive().fit(dm).delta(single))


def test_simulator_baselines_one_seed(tmp_path):
    from sciml.perturbation.compare import simulator_baselines

    df = simulator_baselines(seeds=(0,), names=("additive",), workdir=str(tmp_path))
    assert set(df["model"]) == {"additive", "noise_ceiling"} and set(df["split"]) == {"test", "calib"}
    add = df[df["model"] == "additive"]
    assert add["interacting"].any() and set(add["category"]) == {"double_seen2"}
    ceiling = df[df["model"] == "noise_ceiling"]
    # interactions are real: the additive error on interacting doubles is far above the half-split noise ceiling
    assert add[add["interacting"].astype(bool)]["mse"].mean() > 5 * ceiling["mse"].mean()
