"""LAC, APS and RAPS scores and LabelSet: hand-computed values and finite-sample coverage on softmax data."""

from __future__ import annotations

import math

import pytest
import torch

from sciml.uq import (
    APS,
    CLASSIFICATION_SCORES,
    LAC,
    RAPS,
    LabelSet,
    PredictionSet,
    conformal_quantile,
    conformal_rank,
    coverage,
    set_size,
)

torch.set_num_threads(1)
P = torch.tensor([[0.2, 0.5, 0.3]], dtype=torch.float64)  # ranks: label 1, label 2, label 0


def test_lac_and_deterministic_aps_raps_by_hand() -> None:
    """LAC = 1 - p; APS(u=1) = mass down to the label; RAPS adds λ(rank - k_reg)^+."""
    y = torch.tensor([0])
    torch.testing.assert_close(LAC().all_scores(P), torch.tensor([[0.8, 0.5, 0.7]], dtype=torch.float64))
    torch.testing.assert_close(APS(False).all_scores(P), torch.tensor([[1.0, 0.5, 0.8]], dtype=torch.float64))
    raps = RAPS(False, lam=0.1, k_reg=1).all_scores(P)  # penalties 0, 0.1, 0.2 by rank
    torch.testing.assert_close(raps, torch.tensor([[1.2, 0.5, 0.9]], dtype=torch.float64))
    assert APS(False).score(P, y).item() == 1.0  # least likely label: exactly 1, the atom
    assert LAC().score(P, y).item() == pytest.approx(0.8)


def test_randomised_aps_uses_the_generator() -> None:
    """Randomised APS = mass strictly above + u·p with one u per example, drawn from the generator."""
    u = torch.rand((1, 1), generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    expected = torch.cat([0.8 + u * 0.2, u * 0.5, 0.5 + u * 0.3], dim=-1)
    got = APS().all_scores(P, torch.Generator().manual_seed(3))
    torch.testing.assert_close(got, expected)
    again = APS().all_scores(P, torch.Generator().manual_seed(3))
    assert torch.equal(got, again)
    assert (got <= APS(False).all_scores(P)).all()


def test_scores_follow_label_permutation_and_sets_invert_scores() -> None:
    """Permuting labels permutes scores; the set is exactly {c : s(x, c) <= q}, per-example q broadcasts."""
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(64, 6, generator=g, dtype=torch.float64), -1)
    perm = torch.randperm(6, generator=g)
    q = torch.rand(64, generator=g, dtype=torch.float64)
    for score in (LAC(), APS(False), RAPS(False, lam=0.05, k_reg=2)):
        s = score.all_scores(probs)
        torch.testing.assert_close(score.all_scores(probs[:, perm]), s[:, perm])
        assert torch.equal(score.predict_set(probs, q).mask, s <= q[:, None])
        assert torch.equal(score.predict_set(probs, 0.5).mask, s <= 0.5)
        y = torch.randint(0, 6, (64,), generator=g)
        assert torch.equal(score.score(probs, y), s.gather(1, y[:, None]).squeeze(1))


def _softmax_data(trials: int, m: int, k: int, seed: int, uniform_labels: bool = False):
    """Probabilities softmax(2 z), z ~ N(0, I_k); labels drawn from them (or uniformly: a bad model)."""
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(2 * torch.randn(trials, m, k, generator=g, dtype=torch.float64), -1)
    weights = torch.ones_like(probs) if uniform_labels else probs
    y = torch.multinomial(weights.reshape(-1, k), 1, generator=g).reshape(trials, m)
    return probs, y, g


def _trial_coverage(score, n: int, alpha: float, seed: int, uniform_labels: bool = False):
    """Mean over trials of the coverage of m=50 test points, and its standard error from theory.

    Given the calibration set the coverage is C ~ Beta(k, n+1-k), mean p = k/(n+1) (continuous scores). With
    m test points per trial, Var(trial coverage) = Var(C) + (p(1-p) - Var(C))/m by total variance.
    """
    trials, m = 1000, 50
    probs, y, g = _softmax_data(trials, n + m, 10, seed, uniform_labels)
    q = conformal_quantile(score.score(probs[:, :n], y[:, :n], generator=g), alpha)  # (trials,)
    sets = score.predict_set(probs[:, n:], q[:, None], generator=g)
    cov = sets.contains(y[:, n:]).double().mean().item()
    k = conformal_rank(n, alpha)
    p = k / (n + 1)
    var_c = k * (n + 1 - k) / ((n + 1) ** 2 * (n + 2))
    se = math.sqrt((var_c + (p * (1 - p) - var_c) / m) / trials)
    return cov, p, se


@pytest.mark.parametrize("n", [19, 30])
@pytest.mark.parametrize("name", ["lac", "aps", "raps"])
def test_coverage_is_k_over_n_plus_1(name: str, n: int) -> None:
    """LAC and randomised APS/RAPS (continuous scores): mean coverage within 3 SE of k/(n+1)."""
    # n=19, alpha=0.1: k/(n+1) = 18/20 = 1 - alpha exactly; 3 SE ~ 0.007, an off-by-one rank moves it by 0.05.
    score = RAPS(lam=0.1, k_reg=2) if name == "raps" else CLASSIFICATION_SCORES[name]()
    cov, p, se = _trial_coverage(score, n, 0.1, seed=100 + n)
    assert abs(cov - p) <= 3 * se, (cov, p, se)


def test_deterministic_aps_over_covers_where_randomised_is_exact() -> None:
    """Uniform labels: the true label is often least likely (score exactly 1, an atom), so u=1 over-covers."""
    # P(s = 1) ~ 0.1 > 1 - k/(n+1) for many calibration sets, so q = 1 and the set is all 10 labels.
    cov_r, p, se = _trial_coverage(APS(), 19, 0.1, seed=7, uniform_labels=True)
    assert abs(cov_r - p) <= 3 * se, (cov_r, p, se)
    cov_d, p, se = _trial_coverage(APS(randomized=False), 19, 0.1, seed=7, uniform_labels=True)
    assert cov_d > p + 3 * se, (cov_d, p, se)


def test_randomised_sets_are_smaller() -> None:
    """On the same data, randomised APS gives smaller mean sets than u=1 (its scores are pointwise lower)."""
    probs, y, _ = _softmax_data(1, 2000, 10, seed=11)
    sizes = []
    for score in (APS(), APS(randomized=False)):
        g = torch.Generator().manual_seed(1)
        q = conformal_quantile(score.score(probs[0, :1000], y[0, :1000], generator=g), 0.1)
        sizes.append(set_size(score.predict_set(probs[0, 1000:], q, generator=g)).item())
    assert sizes[0] < sizes[1]


def test_label_set_contains_size_and_metrics() -> None:
    """LabelSet membership, cardinality (also of empty and full rows) and the set metrics."""
    mask = torch.tensor([[True, False, True], [False, False, False], [True, True, True]])
    ls = LabelSet(mask)
    assert isinstance(ls, PredictionSet) and ls.shape == (3,)
    assert torch.equal(ls.contains(torch.tensor([2, 0, 1])), torch.tensor([True, False, True]))
    assert torch.equal(ls.size(), torch.tensor([2.0, 0.0, 3.0]))
    assert set_size(ls).item() == pytest.approx(5 / 3)
    assert coverage(ls, torch.tensor([0, 1, 2])).item() == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    "y", [torch.tensor([0.0, 1.0]), torch.tensor([0, 3]), torch.tensor([-1, 0]), torch.tensor([0]), [0, 1]]
)
def test_label_set_rejects_bad_labels(y: object) -> None:
    """Float, out-of-range, mis-shaped or non-tensor labels raise ValueError."""
    with pytest.raises(ValueError, match="labels"):
        LabelSet(torch.ones(2, 3, dtype=torch.bool)).contains(y)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="labels"):
        LAC().score(torch.full((2, 3), 1 / 3), y)  # type: ignore[arg-type]


def test_constructor_and_input_validation() -> None:
    """Bad masks, probabilities, thresholds and RAPS parameters raise ValueError."""
    for bad in (torch.ones(2, 3), torch.tensor(True)):
        with pytest.raises(ValueError, match="mask"):
            LabelSet(bad)
    for probs in (torch.tensor([[0.5, -0.1]]), torch.tensor([[0.5, math.nan]]), torch.tensor([[1, 0]])):
        with pytest.raises(ValueError, match="probabilities"):
            APS().all_scores(probs)
    with pytest.raises(ValueError, match="all zero"):
        APS().all_scores(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="NaN"):
        LAC().predict_set(P, math.nan)
    for kwargs in ({"lam": -0.1}, {"lam": math.inf}, {"k_reg": -1}, {"k_reg": 1.5}, {"randomized": 1}):
        with pytest.raises(ValueError):
            RAPS(**kwargs)  # type: ignore[arg-type]
    assert set(CLASSIFICATION_SCORES) == {"lac", "aps", "raps"}
