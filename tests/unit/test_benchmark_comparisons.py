"""The paired comparison that the perov5 benchmark reports (difference of test MAE with a bootstrap interval)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("crystal_perov5")


def model(errors_per_seed):
    runs = [{"test_abs_error": list(e)} for e in errors_per_seed]
    return {"per_seed": runs}


def test_difference_is_the_seed_mean_mae_difference(bench):
    rng = np.random.default_rng(0)
    a = np.abs(rng.normal(size=(3, 500)))
    b = np.abs(rng.normal(size=(2, 500)))
    out = bench.paired_difference(model(a), model(b))
    assert out["difference"] == pytest.approx(a.mean() - b.mean(), abs=1e-12)
    low, high = out["ci95"]
    assert low < out["difference"] < high


def test_a_clearly_better_model_has_an_interval_below_zero_and_a_tie_straddles_it(bench):
    rng = np.random.default_rng(1)
    base = np.abs(rng.normal(size=1000)) + 0.5
    better = bench.paired_difference(model([0.8 * base]), model([base]))
    assert better["ci95"][1] < 0 and better["relative"] == pytest.approx(-0.2)
    noise = base + rng.normal(scale=0.05, size=1000)  # same model up to zero-mean noise: no real difference
    tie = bench.paired_difference(model([noise]), model([base]))
    assert tie["ci95"][0] < 0 < tie["ci95"][1]


def test_classical_entries_without_seeds_are_compared_too(bench):
    ours = {"per_seed": [{"test_abs_error": [0.1, 0.2]}]}
    results = {"prdnet": ours, "mean": {"test_abs_error": [0.3, 0.4]}, "old": {"test_mae": 1.0}}
    pairs = bench.comparisons(results)
    assert list(pairs) == ["prdnet - mean"]
    assert pairs["prdnet - mean"]["difference"] == pytest.approx(-0.2)
