"""SplitConformal: coverage on heteroscedastic regression, serialisation, state_dict, errors."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import pytest
import torch

from sciml.uq import (
    CALIBRATORS,
    CQR,
    SCORES,
    AbsoluteResidual,
    Interval,
    IntervalScore,
    NormalizedResidual,
    SplitConformal,
    calibrator_from_dict,
    coverage,
)


def _hetero(m: int, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Known predictor ŷ = sin(2πx); y = ŷ + σ(x) ε with σ(x) = 0.1 + x, x ~ U(0, 1), ε ~ N(0, 1)."""
    x = torch.rand(m, generator=g, dtype=torch.float64)
    sigma = 0.1 + x
    pred = torch.sin(2 * math.pi * x)
    y = pred + sigma * torch.randn(m, generator=g, dtype=torch.float64)
    return x, pred, y, sigma


@pytest.mark.parametrize("score", ["absolute", "normalized"])
@pytest.mark.parametrize("n", [9, 30])
def test_marginal_coverage_heteroscedastic(score: str, n: int) -> None:
    """Marginal coverage is k/(n+1) for both scores on heteroscedastic data."""
    # One test point per trial: coverage indicator is Bernoulli(k/(n+1)) exactly, SE = sqrt(p(1-p)/trials).
    trials, alpha = 2000, 0.1
    g = torch.Generator().manual_seed(7 + n)
    cal = SplitConformal(score, alpha)
    hits = 0
    for _ in range(trials):
        _, pred, y, sigma = _hetero(n + 1, g)
        cal.fit_predictions(pred[:n], y[:n], sigma[:n])
        hits += int(cal.predict_set(pred[n:], sigma[n:]).contains(y[n:]).item())
    p = float(math.ceil((n + 1) * (1 - Fraction("0.1"))) / Fraction(n + 1))
    se = math.sqrt(p * (1 - p) / trials)
    assert abs(hits / trials - p) <= 3 * se, (hits / trials, p, se)


def test_normalized_score_adapts_to_heteroscedastic_noise() -> None:
    """Normalised score covers in every noise regime; absolute does not."""
    # n=2000 calibration, 20000 test points. Normalised: coverage in each x-bin is F(q), same law for every
    # bin: Beta(k, n+1-k) sd ~0.0067 plus binomial sd of ~4000 bin points ~0.0047 -> tolerance 4 * 0.0082.
    # Absolute: one width for all x, so the high-noise bin (σ in [0.9, 1.1]) under-covers (~0.73).
    g = torch.Generator().manual_seed(3)
    n, m, alpha = 2000, 20_000, 0.1
    p = math.ceil((n + 1) * (1 - Fraction("0.1"))) / (n + 1)
    _, pc, yc, sc = _hetero(n, g)
    x, pt, yt, st = _hetero(m, g)
    hi, lo = x > 0.8, x < 0.2
    norm = SplitConformal("normalized", alpha).fit_predictions(pc, yc, sc).predict_set(pt, st)
    absl = SplitConformal("absolute", alpha).fit_predictions(pc, yc, sc).predict_set(pt)
    for mask in (hi, lo):
        cov = coverage(Interval(norm.lower[mask], norm.upper[mask]), yt[mask]).item()
        assert abs(cov - p) <= 4 * 0.0082, cov
    assert coverage(Interval(absl.lower[hi], absl.upper[hi]), yt[hi]).item() < p - 4 * 0.0082
    # Normalised widths are exactly 2 q σ.
    q = SplitConformal("normalized", alpha).fit_predictions(pc, yc, sc).threshold()
    torch.testing.assert_close(norm.size(), 2 * q * st)


def test_threshold_before_fit_raises() -> None:
    """Using an unfitted calibrator raises RuntimeError saying to fit first."""
    cal = SplitConformal()
    assert cal.n_calib == 0
    with pytest.raises(RuntimeError, match="fit"):
        cal.threshold()
    with pytest.raises(RuntimeError, match="fit"):
        cal.predict_set(torch.zeros(3))
    with pytest.raises(RuntimeError, match="fit"):
        cal.to_dict()


def test_fit_sorts_and_threshold_uses_alpha() -> None:
    """Scores are stored sorted; threshold honours a per-call alpha."""
    scores = torch.tensor([5.0, 1.0, 4.0, 2.0, 3.0, 9.0, 8.0, 7.0, 6.0, 10.0, 0.0, 11.0, 12.0, 13.0, 14.0])
    cal = SplitConformal(alpha=0.1).fit(scores)
    assert cal.n_calib == 15 and torch.equal(cal.scores, scores.sort().values)
    assert cal.threshold().item() == 14.0  # k = ceil(16 * 0.9) = 15 -> max
    assert cal.threshold(alpha=0.5).item() == 7.0  # k = 8
    assert cal.threshold(alpha=0.01).item() == math.inf  # k = 16 > 15


@pytest.mark.parametrize(
    "bad", [torch.empty(0), torch.ones(3, 2), torch.tensor([1.0, float("nan")]), torch.tensor([math.inf])]
)
def test_fit_rejects_bad_scores(bad: torch.Tensor) -> None:
    """Empty, 2-D and non-finite calibration scores raise ValueError."""
    with pytest.raises(ValueError):
        SplitConformal().fit(bad)


def test_interval_contains_and_size() -> None:
    """Interval membership is closed; size is the width; bad bounds raise."""
    iv = Interval(torch.tensor([0.0, -1.0, 2.0]), torch.tensor([1.0, 1.0, 2.0]))
    assert torch.equal(iv.contains(torch.tensor([1.0, -1.5, 2.0])), torch.tensor([True, False, True]))
    assert torch.equal(iv.size(), torch.tensor([1.0, 2.0, 0.0]))
    with pytest.raises(ValueError, match="shape"):
        iv.contains(torch.zeros(2))
    with pytest.raises(ValueError, match="lower > upper"):
        Interval(torch.tensor([1.0]), torch.tensor([0.0]))
    with pytest.raises(ValueError, match="same shape"):
        Interval(torch.zeros(2), torch.zeros(3))


@pytest.mark.parametrize("score", ["absolute", "normalized"])
def test_inf_threshold_gives_full_line(score: str) -> None:
    """An infinite threshold gives infinite width and contains everything."""
    cal = SplitConformal(score, alpha=0.1).fit(torch.rand(8))  # k = 9 > 8
    pred, sigma = torch.tensor([0.0, 5.0, -3.0]), torch.tensor([1.0, 0.5, 2.0])
    iv = cal.predict_set(pred, sigma)
    assert torch.isinf(iv.size()).all() and (iv.size() > 0).all()
    assert iv.contains(torch.tensor([1e30, -1e30, math.inf])).all()


def test_scores_and_intervals_are_inverse() -> None:
    """Hand-computed scores and intervals; registries list the classes."""
    pred, y, sigma = torch.tensor([0.0, 1.0]), torch.tensor([0.5, -1.0]), torch.tensor([0.5, 4.0])
    assert torch.equal(AbsoluteResidual().score(pred, y), torch.tensor([0.5, 2.0]))
    assert torch.equal(NormalizedResidual().score(pred, y, sigma), torch.tensor([1.0, 0.5]))
    iv = NormalizedResidual().interval(pred, 1.0, sigma)
    assert torch.equal(iv.lower, torch.tensor([-0.5, -3.0]))
    assert torch.equal(iv.upper, torch.tensor([0.5, 5.0]))
    iv = AbsoluteResidual().interval(pred, torch.tensor(2.0))
    assert torch.equal(iv.lower, torch.tensor([-2.0, -1.0]))
    assert torch.equal(iv.upper, torch.tensor([2.0, 3.0]))
    assert SCORES == {"absolute": AbsoluteResidual, "normalized": NormalizedResidual, "cqr": CQR}
    assert all(issubclass(cls, IntervalScore) and cls.name == name for name, cls in SCORES.items())
    assert CALIBRATORS["split"] is SplitConformal


@pytest.mark.parametrize("sigma", [None, torch.tensor([1.0, 0.0]), torch.tensor([1.0, -2.0]), torch.ones(3)])
def test_normalized_needs_positive_sigma(sigma: torch.Tensor | None) -> None:
    """Missing, non-positive or mis-shaped sigma raises ValueError."""
    pred, y = torch.zeros(2), torch.ones(2)
    with pytest.raises(ValueError, match="sigma"):
        NormalizedResidual().score(pred, y, sigma)
    with pytest.raises(ValueError, match="sigma"):
        NormalizedResidual().interval(pred, 1.0, sigma)
    with pytest.raises(ValueError, match="sigma"):
        SplitConformal("normalized").fit_predictions(pred, y, sigma)


@pytest.mark.parametrize("score", ["absolute", "normalized"])
def test_dict_round_trip_through_json(score: str) -> None:
    """to_dict -> JSON -> from_dict gives identical thresholds at every alpha."""
    scores = torch.rand(57, generator=torch.Generator().manual_seed(4))  # float32
    cal = SplitConformal(score, alpha=0.2).fit(scores)
    d = json.loads(json.dumps(cal.to_dict()))
    assert d["method"] == "split" and d["score"] == score and d["alpha"] == 0.2 and len(d["scores"]) == 57
    for new in (SplitConformal.from_dict(d), calibrator_from_dict(d)):
        assert isinstance(new, SplitConformal) and new.score_name == score and new.alpha == 0.2
        for alpha in (None, 0.05, 0.1, 0.5, 0.9):
            assert new.threshold(alpha).item() == cal.threshold(alpha).item()


@pytest.mark.parametrize("n_target", [0, 10, 200])
def test_state_dict_round_trip_any_size(n_target: int) -> None:
    """state_dict loads into a calibrator fitted on any number of scores."""
    scores = torch.rand(50, generator=torch.Generator().manual_seed(5))
    cal = SplitConformal("normalized", alpha=0.1).fit(scores)
    fresh = SplitConformal("normalized", alpha=0.1)
    if n_target:
        fresh.fit(torch.rand(n_target))
    fresh.load_state_dict(cal.state_dict())
    assert fresh.n_calib == 50 and torch.equal(fresh.scores, cal.scores)
    assert fresh.threshold().item() == cal.threshold().item()
    # An unfitted state dict loads back into an unfitted calibrator.
    fresh.load_state_dict(SplitConformal().state_dict())
    assert fresh.n_calib == 0


def test_state_dict_with_nonfinite_scores_is_rejected() -> None:
    """Loading non-finite scores from a state dict fails."""
    with pytest.raises(RuntimeError, match="finite"):
        SplitConformal().load_state_dict({"scores": torch.tensor([1.0, math.nan])})


def _good() -> dict:
    return {"method": "split", "score": "absolute", "alpha": 0.1, "scores": [0.1, 0.2, 0.3]}


@pytest.mark.parametrize(
    ("patch", "match"),
    [
        ({"method": "cqr"}, "method"),
        ({"score": "huber"}, "score"),
        ({"score": ["absolute"]}, "score"),
        ({"alpha": 1.5}, "alpha"),
        ({"alpha": "0.1"}, "alpha"),
        ({"scores": [0.1, float("nan")]}, "finite"),
        ({"scores": [0.1, float("inf")]}, "finite"),
        ({"scores": []}, "empty"),
        ({"scores": "0.1,0.2"}, "list"),
        ({"scores": [0.1, "x"]}, "list"),
        ({"extra": 1}, "unexpected"),
    ],
)
def test_malformed_dict_raises(patch: dict, match: str) -> None:
    """Each malformed field raises ValueError naming the problem."""
    d = _good() | patch
    with pytest.raises(ValueError, match=match):
        calibrator_from_dict(d)
    if "method" not in patch:
        with pytest.raises(ValueError, match=match):
            SplitConformal.from_dict(d)


@pytest.mark.parametrize("key", ["method", "score", "alpha", "scores"])
def test_missing_key_raises(key: str) -> None:
    """A missing key raises ValueError naming it."""
    d = _good()
    del d[key]
    with pytest.raises(ValueError, match="method" if key == "method" else "missing"):
        calibrator_from_dict(d)
    with pytest.raises(ValueError, match="missing"):
        SplitConformal.from_dict(d)


@pytest.mark.parametrize("bad", [None, [("method", "split")], "split"])
def test_non_mapping_raises(bad: object) -> None:
    """A non-mapping raises ValueError."""
    with pytest.raises(ValueError):
        calibrator_from_dict(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SplitConformal.from_dict(bad)  # type: ignore[arg-type]


def test_constructor_validates() -> None:
    """Unknown score name and invalid alpha raise ValueError."""
    with pytest.raises(ValueError, match="unknown score"):
        SplitConformal("huber")
    with pytest.raises(ValueError, match="alpha"):
        SplitConformal(alpha=0.0)
