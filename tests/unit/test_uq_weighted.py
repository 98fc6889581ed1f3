"""Weighted split conformal under covariate shift: exact quantile rule, coverage restored, ESS guard, errors."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from sciml.uq import (
    conformal_quantile,
    density_ratio,
    effective_sample_size,
    weighted_conformal_threshold,
    weighted_thresholds,
)
from sciml.uq.weighted import C_GRID

ALPHA = 0.1


def _shifted_regression(n: int, mu: float, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """x ~ N(mu, 1) as a (n, 1) embedding; absolute residual |σ(x) ε| of an exact mean model, σ(x) = exp(0.6 x).

    The noise grows with x, so a test batch shifted to larger x needs wider intervals than calibration at mu = 0.
    """
    x = mu + torch.randn(n, 1, generator=g, dtype=torch.float64)
    return x, (torch.exp(0.6 * x[:, 0]) * torch.randn(n, generator=g, dtype=torch.float64)).abs()


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.2, 0.7])
def test_equal_weights_reproduce_split_conformal(alpha: float) -> None:
    """With w = 1 everywhere the weighted quantile is Q_{1-α}(S ∪ {∞}) exactly, including the +inf cases."""
    g = torch.Generator().manual_seed(0)
    for n in range(1, 60):
        s = torch.rand(n, generator=g, dtype=torch.float64)
        q = weighted_conformal_threshold(
            s, torch.ones(n, dtype=torch.float64), torch.ones(3, dtype=torch.float64), alpha
        )
        assert torch.equal(q, conformal_quantile(s, alpha).expand(3)), (n, alpha)


def test_weighted_quantile_by_hand() -> None:
    """Scores 1..4: the test point's own weight sits on +inf; smallest s_k with cumulative weight >= (1-α)(W+w)."""
    s = torch.tensor([4.0, 1.0, 3.0, 2.0], dtype=torch.float64)
    w_cal = torch.tensor([5.0, 1.0, 1.0, 1.0], dtype=torch.float64)  # weight 5 on the score 4
    # W = 8, level 0.75 (8 + w): w=1 -> 6.75, cumulative 1,2,3,8 -> 4; w=10 -> 13.5 > 8 -> inf; w=0 -> 6 -> 4
    q = weighted_conformal_threshold(s, w_cal, torch.tensor([1.0, 10.0, 0.0], dtype=torch.float64), 0.25)
    assert q.tolist() == [4.0, math.inf, 4.0]
    w_low = torch.tensor([1.0, 5.0, 1.0, 1.0], dtype=torch.float64)  # weight 5 on the score 1: 5,6,7,8 -> 3
    assert weighted_conformal_threshold(s, w_low, torch.ones(1, dtype=torch.float64), 0.25).item() == 3.0


def test_effective_sample_size() -> None:
    """ESS is n for equal weights, 1 for a single nonzero weight, scale-invariant."""
    assert effective_sample_size(torch.full((40,), 3.0)) == pytest.approx(40)
    assert effective_sample_size(torch.tensor([0.0, 2.0, 0.0])) == pytest.approx(1)
    w = torch.rand(50, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert effective_sample_size(w) == pytest.approx(effective_sample_size(7 * w))


def test_weighting_restores_coverage_under_covariate_shift() -> None:
    """Calibration at x ~ N(0,1), test at N(1,1): plain split conformal under-covers, weighted covers 1-α.

    Per seed the coverage over m test points has variance ≈ α(1-α)/m (binomial) + α(1-α)/ESS (the calibration
    draw, ESS equally weighted scores); the mean over S seeds is checked to 3 sd. Plain coverage is ≈ 0.74.
    """
    seeds, n, m = 10, 1000, 1000
    plain, weighted, ess = [], [], []
    for seed in range(seeds):
        g = torch.Generator().manual_seed(100 + seed)
        x_cal, s_cal = _shifted_regression(n, 0.0, g)
        x_test, s_test = _shifted_regression(m, 1.0, g)
        res = weighted_thresholds(s_cal, x_cal, x_test, ALPHA, seed=seed)
        assert not res.guarded and not bool(res.infinite.any())
        plain.append(float((s_test <= conformal_quantile(s_cal, ALPHA)).double().mean()))
        weighted.append(float((s_test <= res.thresholds).double().mean()))
        ess.append(res.ess)
    tol = 3 * math.sqrt(ALPHA * (1 - ALPHA) * (1 / m + 1 / min(ess)) / seeds)
    mean_plain, mean_weighted = sum(plain) / seeds, sum(weighted) / seeds
    assert mean_plain < 1 - ALPHA - 0.1, mean_plain  # clearly below target
    assert abs(mean_weighted - (1 - ALPHA)) <= tol, (mean_weighted, tol)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ess_guard_gives_infinite_thresholds_for_extreme_shift(seed: int) -> None:
    """Test batch at x ~ N(4, 1): the calibration weights collapse onto a few points, ESS < 50 -> all +inf."""
    g = torch.Generator().manual_seed(seed)
    x_cal, s_cal = _shifted_regression(1000, 0.0, g)
    x_test, _ = _shifted_regression(500, 4.0, g)
    res = weighted_thresholds(s_cal, x_cal, x_test, ALPHA, seed=seed)
    assert res.guarded and res.ess < res.ess_floor == 50.0
    assert bool(res.infinite.all())
    forced = weighted_thresholds(s_cal, x_cal, x_cal[:200] + 0.1, ALPHA, min_ess=2000.0)  # floor above n
    assert forced.guarded and bool(forced.infinite.all())


def test_no_shift_matches_plain_split_conformal() -> None:
    """Exchangeable calibration and batch: weights ≈ 1, and every weighted threshold sits at a calibration rank
    within 3 binomial sd (sqrt(α(1-α)/n)) of the plain rank ⌈(n+1)(1-α)⌉/n.
    """
    g = torch.Generator().manual_seed(7)
    n = 1000
    x_cal, s_cal = _shifted_regression(n, 0.0, g)
    x_test, _ = _shifted_regression(800, 0.0, g)
    res = weighted_thresholds(s_cal, x_cal, x_test, ALPHA)
    assert not res.guarded and res.ess > 0.9 * n
    plain_rank = math.ceil((n + 1) * (1 - Fraction("0.1"))) / n
    ranks = (s_cal[None, :] <= res.thresholds[:, None]).double().mean(1)
    assert float((ranks - plain_rank).abs().max()) <= 3 * math.sqrt(ALPHA * (1 - ALPHA) / n)


def test_high_dimensional_embeddings_do_not_fake_a_shift() -> None:
    """d = 64 exchangeable embeddings: principal components + cross-fitting keep the weights near 1 (ESS > 0.8 n)."""
    g = torch.Generator().manual_seed(11)
    cal, test = (torch.randn(600, 64, generator=g, dtype=torch.float64) for _ in range(2))
    w_cal, w_test = density_ratio(cal, test)
    assert effective_sample_size(w_cal) > 0.8 * 600 and w_test.shape == (600,)
    shifted = test + torch.linspace(0, 1.5, 64, dtype=torch.float64)  # a real shift is still found
    assert effective_sample_size(density_ratio(cal, shifted)[0]) < 0.5 * 600


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auto_c_gives_near_uniform_weights_without_shift(seed: int) -> None:
    """Exchangeable d = 8 embeddings: the held-out-log-loss choice of C keeps the weights near 1.

    Tolerance: a logistic fit on ``N_fit`` rows (cross-fitted, ``N_fit = (1 - 1/5) N``) with class share ``p`` has
    logit error of variance ``τ² ≈ (d+1)/(N_fit p(1-p))`` (MLE asymptotics; a penalty only shrinks it). For
    log-normal weights ``ESS/n = exp(-τ²)``; allowing 3·τ² (a χ²_{d+1}/(d+1) above 3 has probability ~1e-4)
    gives ``ESS >= n exp(-3τ²)`` ≈ 0.93 n here.
    """
    g = torch.Generator().manual_seed(seed)
    n, m, d = 1000, 800, 8
    cal, test = torch.randn(n, d, generator=g, dtype=torch.float64), torch.randn(m, d, generator=g, dtype=torch.float64)
    s = torch.rand(n, generator=g, dtype=torch.float64)
    res = weighted_thresholds(s, cal, test, ALPHA, seed=seed)
    p = m / (n + m)
    tau2 = (d + 1) / ((n + m) * (1 - 1 / 5) * p * (1 - p))
    assert not res.guarded and res.ess >= n * math.exp(-3 * tau2), (res.ess, n * math.exp(-3 * tau2))
    assert len(res.C) == 5 and all(c in C_GRID for c in res.C)


def test_explicit_c_is_used_as_given() -> None:
    """A numeric C skips the search: in-sample (n_folds = 1) weights equal the odds of scikit-learn's own fit."""
    from sklearn.linear_model import LogisticRegression

    g = torch.Generator().manual_seed(5)
    cal, test = torch.randn(300, 3, generator=g, dtype=torch.float64), 0.5 + torch.randn(200, 3, generator=g,
                                                                                          dtype=torch.float64)
    s = torch.rand(300, generator=g, dtype=torch.float64)
    res = weighted_thresholds(s, cal, test, ALPHA, C=0.05)
    assert res.C == (0.05,) * 5
    w_cal, w_test = density_ratio(cal, test, C=0.05, n_folds=1)
    x = torch.cat([cal, test])
    x = ((x - x.mean(0)) / x.std(0)).numpy()
    label = [0] * 300 + [1] * 200
    logit = LogisticRegression(C=0.05, max_iter=1000).fit(x, label).decision_function(x)
    expected = torch.from_numpy(logit).exp() * 300 / 200
    torch.testing.assert_close(torch.cat([w_cal, w_test]), expected, rtol=1e-6, atol=0)
    for bad in ("best", -1.0, math.nan):
        with pytest.raises(ValueError, match="C"):
            density_ratio(cal, test, C=bad)


def test_errors() -> None:
    """Mismatched lengths, NaN, negative weights, a batch too small to classify, bad settings."""
    g = torch.Generator().manual_seed(3)
    x, s = _shifted_regression(100, 0.0, g)
    one = torch.ones(1, dtype=torch.float64)
    with pytest.raises(ValueError, match="one per calibration row"):
        weighted_thresholds(s[:50], x, x + 1)
    with pytest.raises(ValueError, match="larger batch"):
        weighted_thresholds(s, x, x[:3] + 1)
    with pytest.raises(ValueError, match="NaN"):
        weighted_thresholds(s, x, torch.full((20, 1), math.nan, dtype=torch.float64))
    with pytest.raises(ValueError, match="dimension"):
        weighted_thresholds(s, x, torch.zeros(20, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="clip"):
        density_ratio(x, x + 1, clip=0.5)
    with pytest.raises(ValueError, match="min_ess"):
        weighted_thresholds(s, x, x + 1, min_ess=-1)
    with pytest.raises(ValueError, match="weights must be >= 0"):
        weighted_conformal_threshold(s, -torch.ones(100, dtype=torch.float64), one, ALPHA)
    with pytest.raises(ValueError, match="finite"):
        weighted_conformal_threshold(s, torch.ones(100, dtype=torch.float64), one * math.inf, ALPHA)
    with pytest.raises(ValueError, match="alpha"):
        weighted_conformal_threshold(s, torch.ones(100, dtype=torch.float64), one, 1.0)


def test_grouped_thresholds_equal_weights_are_per_group_split_conformal() -> None:
    """With equal weights each group's threshold is that group's plain conformal quantile; a group never
    calibrated gets +inf; a group whose weights collapse onto few points is guarded."""
    from sciml.uq import conformal_quantile, grouped_weighted_thresholds

    gen = torch.Generator().manual_seed(3)
    scores = torch.cat([torch.rand(200, generator=gen, dtype=torch.float64),
                        5 + torch.rand(100, generator=gen, dtype=torch.float64)])
    groups = torch.cat([torch.zeros(200, dtype=torch.long), torch.ones(100, dtype=torch.long)])
    test_groups = torch.tensor([0, 1, 1, 2])
    res = grouped_weighted_thresholds(scores, torch.ones(300, dtype=torch.float64), groups,
                                      torch.ones(4, dtype=torch.float64), test_groups, alpha=0.1)
    assert res.thresholds[0] == conformal_quantile(scores[:200], 0.1)
    assert (res.thresholds[1:3] == conformal_quantile(scores[200:], 0.1)).all()
    assert torch.isinf(res.thresholds[3]) and res.guarded == []
    peaked = torch.ones(300, dtype=torch.float64)
    peaked[200:] = 1e-6
    peaked[200] = 1.0  # group 1's weight sits on one calibration point: ESS ~ 1
    res = grouped_weighted_thresholds(scores, peaked, groups, torch.ones(4, dtype=torch.float64), test_groups, 0.1)
    assert res.guarded == [1] and res.ess[1] < res.floors[1]
    assert torch.isfinite(res.thresholds[0]) and torch.isinf(res.thresholds[1:]).all()
