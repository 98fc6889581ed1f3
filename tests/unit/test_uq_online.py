"""Online calibrators: deterministic long-run coverage bounds of ACI and quantile tracking, state, metrics."""

from __future__ import annotations

import json
import math

import pytest
import torch

from sciml.testing.streams import heavy_tailed, regime_switch
from sciml.uq import (
    ACI,
    CALIBRATORS,
    QuantileTracker,
    SplitConformal,
    calibrator_from_dict,
    long_run_coverage,
    rolling_coverage,
)

torch.set_num_threads(1)
ALPHA, TS = 0.1, (500, 2000, 5000)


def _run_aci(aci: ACI, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Predict with q_t, reveal s_t, update; return covered (T,) and the path α_1..α_{T+1}."""
    covered, alphas = [], [float(aci.alpha_t)]
    for s in scores.tolist():
        hit = s <= aci.threshold().item()
        aci.update(hit, s)
        covered.append(hit)
        alphas.append(float(aci.alpha_t))
    return torch.tensor(covered), torch.tensor(alphas, dtype=torch.float64)


@pytest.mark.parametrize("stream", [regime_switch, heavy_tailed])
@pytest.mark.parametrize("gamma", [0.01, 0.05])
def test_aci_long_run_bound(stream, gamma: float) -> None:
    """Gibbs & Candès Prop. 4.1: |mean err - α| <= (max(α_1, 1-α_1) + γ)/(γT), several T; Lemma 4.1."""
    g = torch.Generator().manual_seed(int(gamma * 1000))
    for t in TS:
        aci = ACI("absolute", ALPHA, gamma=gamma, window=100).fit(
            torch.randn(100, generator=g).double().abs()
        )
        covered, alphas = _run_aci(aci, stream(t, g))
        miscoverage = 1 - long_run_coverage(covered)[-1].item()
        bound = (max(ALPHA, 1 - ALPHA) + gamma) / (gamma * t)  # in [0.0038, 0.18]: never vacuous here
        assert abs(miscoverage - ALPHA) <= bound, (t, miscoverage, bound)
        assert alphas.min() >= -gamma and alphas.max() <= 1 + gamma  # Lemma 4.1


def test_static_threshold_fails_on_the_switch() -> None:
    """Negative control: a fixed split threshold misses the bound by far on the regime-switch stream."""
    g = torch.Generator().manual_seed(10)
    q = SplitConformal("absolute", ALPHA).fit(torch.randn(100, generator=g).double().abs()).threshold()
    t = TS[-1]
    miscoverage = (regime_switch(t, g) > q).double().mean().item()  # ~ 0.05 + 0.5 * 0.87
    assert abs(miscoverage - ALPHA) > 10 * (max(ALPHA, 1 - ALPHA) + 0.01) / (0.01 * t)


def _bounded(t: int) -> torch.Tensor:
    """Adversarial scores in [0, 1]: low block, high block, then a sawtooth with rare spikes to 1."""
    third = t // 3
    ramp = torch.arange(t - 2 * third, dtype=torch.float64) % 50 / 50
    ramp[::37] = 1.0
    low = torch.linspace(0.0, 0.2, third, dtype=torch.float64)
    return torch.cat([low, 1.0 - low, ramp])


@pytest.mark.parametrize("lr", [0.05, 0.2])
def test_quantile_tracker_long_run_bound(lr: float) -> None:
    """Scores in [0, B], q_1 ∈ [0, B]: |mean err - α| <= (B + η)/(ηT) (Angelopoulos et al. 2023)."""
    b = 1.0
    for t in TS:
        tracker = QuantileTracker("absolute", ALPHA, lr=lr, q0=0.5)
        err, qs = [], []
        for s in _bounded(t).tolist():
            err.append(s > tracker.threshold().item())
            tracker.update(s)
            qs.append(float(tracker.q))
        mean_err = sum(err) / t
        assert abs(mean_err - ALPHA) <= (b + lr) / (lr * t), (t, mean_err)
        assert min(qs) >= -ALPHA * lr - 1e-12 and max(qs) <= b + (1 - ALPHA) * lr + 1e-12
        # Negative control: the initial threshold kept fixed misses the bound.
        assert abs((_bounded(t) > 0.5).double().mean().item() - ALPHA) > (b + lr) / (lr * t)


def test_empty_and_full_sets_at_the_extremes() -> None:
    """α_t >= 1: empty set (degenerate interval), a miss; α_t <= 0: the whole line, covered."""
    aci = ACI(alpha=0.1, gamma=0.5).fit(torch.ones(50))
    aci.alpha_t.fill_(1.2)
    assert aci.threshold().item() == -math.inf
    iv = aci.predict_set(torch.tensor([1.0, 2.0]))
    assert iv.size().tolist() == [0.0, 0.0]
    aci.update(True)  # ignored: the set is empty, err = 1
    assert float(aci.alpha_t) == pytest.approx(1.2 + 0.5 * (0.1 - 1))
    aci.alpha_t.fill_(-0.1)
    assert torch.isinf(aci.predict_set(torch.zeros(2)).size()).all()
    aci.update(False)  # ignored: the set is everything, err = 0
    assert float(aci.alpha_t) == pytest.approx(-0.1 + 0.5 * 0.1)
    tracker = QuantileTracker(q0=-0.01)
    assert tracker.predict_set(torch.tensor([3.0])).size().item() == 0.0
    tracker.update(0.0)  # 0 > -0.01: a miss by the unclamped rule
    assert float(tracker.q) == pytest.approx(-0.01 + 0.1 * 0.9)


def test_aci_window_and_threshold() -> None:
    """The window keeps the last w scores in arrival order; q_t is their conformal quantile at α_t."""
    aci = ACI(alpha=0.5, gamma=0.1, window=3).fit(torch.tensor([5.0, 1.0, 2.0, 3.0]))
    assert aci.scores.tolist() == [1.0, 2.0, 3.0]
    assert aci.threshold().item() == 2.0  # k = ceil(4 * 0.5) = 2
    aci.update(torch.tensor(True), torch.tensor(9.0))
    assert aci.scores.tolist() == [2.0, 3.0, 9.0] and float(aci.alpha_t) == pytest.approx(0.55)
    assert ACI().threshold().item() == math.inf  # no scores yet: full set


@pytest.mark.parametrize("kind", ["aci", "quantile_tracker"])
def test_round_trips_mid_stream(kind: str) -> None:
    """to_dict -> JSON -> from_dict and state_dict restore a running calibrator exactly."""
    g = torch.Generator().manual_seed(3)
    scores = torch.randn(60, generator=g, dtype=torch.float64).abs().tolist()
    cal = ACI(gamma=0.05, window=20) if kind == "aci" else QuantileTracker(lr=0.3, q0=1.0)

    def step(c, s: float) -> float:
        q = c.threshold().item()
        if kind == "aci":
            c.update(s <= q, s)
        else:
            c.update(s)
        return q

    for s in scores[:30]:
        step(cal, s)
    d = json.loads(json.dumps(cal.to_dict()))
    assert CALIBRATORS[kind] is type(cal) and d["method"] == kind
    via_state = type(cal)(**({"gamma": 0.05, "window": 20} if kind == "aci" else {"lr": 0.3}))
    via_state.load_state_dict(cal.state_dict())
    copies = [type(cal).from_dict(d), calibrator_from_dict(d), via_state]
    for s in scores[30:]:
        q = step(cal, s)
        assert all(step(c, s) == q for c in copies)


@pytest.mark.parametrize(
    ("patch", "match"),
    [
        ({"gamma": 0.0}, "gamma"),
        ({"gamma": "0.1"}, "gamma"),
        ({"window": 0}, "window"),
        ({"window": 2.0}, "window"),
        ({"window": 1}, "more than window"),
        ({"alpha_t": math.nan}, "alpha_t"),
        ({"alpha_t": None}, "alpha_t"),
        ({"scores": [0.1, math.inf]}, "finite"),
        ({"alpha": 1.0}, "alpha"),
        ({"score": "huber"}, "score"),
        ({"method": "quantile_tracker"}, "method"),
        ({"extra": 1}, "unexpected"),
    ],
)
def test_aci_malformed_dict(patch: dict, match: str) -> None:
    """Each malformed ACI field raises ValueError naming it."""
    d = {"method": "aci", "score": "absolute", "alpha": 0.1, "gamma": 0.01, "window": 5}
    d |= {"alpha_t": 0.2, "scores": [0.1, 0.2]}
    with pytest.raises(ValueError, match=match):
        ACI.from_dict(d | patch)


@pytest.mark.parametrize(
    ("patch", "match"),
    [
        ({"lr": -1.0}, "lr"),
        ({"q": math.inf}, "q0"),
        ({"q": True}, "q0"),
        ({"alpha": 0}, "alpha"),
        ({"x": 1}, "unexpected"),
    ],
)
def test_tracker_malformed_dict(patch: dict, match: str) -> None:
    """Each malformed tracker field raises ValueError naming it; a missing key too."""
    d = {"method": "quantile_tracker", "score": "absolute", "alpha": 0.1, "lr": 0.1, "q": 0.3}
    with pytest.raises(ValueError, match=match):
        calibrator_from_dict(d | patch)
    with pytest.raises(ValueError, match="missing"):
        QuantileTracker.from_dict({k: v for k, v in d.items() if k != "q"})


@pytest.mark.parametrize("bad", [0.5, 2, torch.tensor([True, False]), "yes", math.nan])
def test_update_rejects_bad_covered(bad: object) -> None:
    """Covered must be one bool or 0/1 (one time step)."""
    with pytest.raises(ValueError, match="covered"):
        ACI().update(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [math.inf, math.nan, True, torch.tensor([1.0, 2.0]), "1"])
def test_update_rejects_bad_scores(bad: object) -> None:
    """A revealed score must be one finite number."""
    with pytest.raises(ValueError, match="score"):
        ACI().update(True, bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="score"):
        QuantileTracker().update(bad)  # type: ignore[arg-type]


def test_long_run_and_rolling_coverage_by_hand() -> None:
    """Running mean and sliding-window coverage on a short stream; bad inputs raise."""
    covered = torch.tensor([True, False, True, True])
    assert long_run_coverage(covered).tolist() == pytest.approx([1.0, 0.5, 2 / 3, 0.75])
    assert rolling_coverage(covered, 2).tolist() == [0.5, 0.5, 1.0]
    assert rolling_coverage(covered, 4).tolist() == [0.75]
    for bad_window in (0, 5, 2.0, True):
        with pytest.raises(ValueError, match="window"):
            rolling_coverage(covered, bad_window)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="covered"):
        long_run_coverage(torch.empty(0))


@pytest.mark.parametrize("cls", [QuantileTracker, ACI])
def test_online_cqr_negative_threshold_not_clamped(cls) -> None:
    """Regression: CQR scores are signed, so a negative q_t must shrink the band, not be clamped to 0."""
    pred = torch.tensor([[0.0, 4.0], [-1.0, 1.0]], dtype=torch.float64)
    if cls is QuantileTracker:
        cal = QuantileTracker("cqr", ALPHA, lr=1.0, q0=-0.5)
    else:
        cal = ACI("cqr", ALPHA, gamma=0.01).fit(torch.full((20,), -0.5, dtype=torch.float64))
    assert cal.threshold().item() == -0.5
    band = cal.predict_set(pred)
    assert torch.equal(band.lower, torch.tensor([0.5, -0.5], dtype=torch.float64))
    assert torch.equal(band.upper, torch.tensor([3.5, 0.5], dtype=torch.float64))
    # the y = 0.25 point of the first row lies in the raw band but scores -0.25 > q: it must be excluded
    y = torch.tensor([0.25, 0.0], dtype=torch.float64)
    score = cal.score_fn.score(pred, y)
    assert torch.equal(band.contains(y), score <= -0.5)
    # non-negative scores still clamp (an Interval cannot be empty)
    absolute = QuantileTracker("absolute", ALPHA, lr=1.0, q0=-0.5).predict_set(pred[:, 0])
    assert torch.equal(absolute.size(), torch.zeros(2, dtype=torch.float64))
