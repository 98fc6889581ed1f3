"""Conformal PID and SF-OGD: deterministic long-run coverage bounds on adversarial streams, hooks, state."""

from __future__ import annotations

import json
import math

import pytest
import torch

from sciml.testing.streams import heavy_tailed, regime_switch
from sciml.uq import (
    CALIBRATORS,
    SFOGD,
    ConformalPID,
    QuantileTracker,
    calibrator_from_dict,
    pid_bound,
    sf_ogd_bound,
)
from tests.unit.test_uq_online import _bounded

torch.set_num_threads(1)
ALPHA, TS = 0.1, (500, 2000, 5000)


def _run(cal, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Predict with q_t, reveal s_t, update; return err (T,) and the thresholds q_1..q_T."""
    err, qs = [], []
    for s in scores.tolist():
        q = cal.threshold().item()
        err.append(s > q)
        qs.append(q)
        cal.update(s)
    return torch.tensor(err, dtype=torch.float64), torch.tensor(qs, dtype=torch.float64)


@pytest.mark.parametrize("stream", [regime_switch, heavy_tailed])
@pytest.mark.parametrize(("c_sat", "k_i", "window"), [(0.1, 1.0, None), (0.3, 5.0, 50)])
def test_pid_long_run_bound_on_any_stream(stream, c_sat: float, k_i: float, window: int | None) -> None:
    """|mean err - α| <= (H_T + max(α, 1-α))/T for unbounded scores (×10 jumps, |Cauchy|), several T."""
    g = torch.Generator().manual_seed(int(100 * c_sat))
    for t in TS:
        pid = ConformalPID("absolute", ALPHA, lr=0.05, q0=1.0, k_i=k_i, c_sat=c_sat, window=window)
        err, _ = _run(pid, stream(t, g))
        bound = pid_bound(t, ALPHA, c_sat)  # c_sat = 0.1: 0.027 (T=500) .. 0.019 (T=5000)
        assert abs(err.mean().item() - ALPHA) <= bound < 0.2, (t, err.mean().item(), bound)
        assert int(pid.steps) == t and float(pid.err_sum) == pytest.approx((err - ALPHA).sum().item())


def test_integrator_rescues_a_slow_tracker() -> None:
    """Negative control: P alone with a small step misses the PID bound after the ×10 jump; P + I meets it."""
    g = torch.Generator().manual_seed(11)
    scores, t = regime_switch(2000, g), 2000
    p_only, _ = _run(ConformalPID(lr=0.01, q0=1.0, k_i=0.0), scores)
    pid, _ = _run(ConformalPID(lr=0.01, q0=1.0, k_i=1.0, c_sat=0.1), scores)
    bound = pid_bound(t, ALPHA, 0.1)
    assert abs(p_only.mean().item() - ALPHA) > 3 * bound
    assert abs(pid.mean().item() - ALPHA) <= bound


def test_p_part_is_quantile_tracking() -> None:
    """K_I = 0 without window or scorecaster reproduces QuantileTracker threshold for threshold."""
    scores = heavy_tailed(800, torch.Generator().manual_seed(2))
    _, q_pid = _run(ConformalPID(lr=0.2, q0=0.5, k_i=0.0), scores)
    _, q_qt = _run(QuantileTracker(lr=0.2, q0=0.5), scores)
    assert torch.equal(q_pid, q_qt)


def test_integrator_saturates_and_threshold_adds_three_terms() -> None:
    """q = q̂ + K_I tan(E log(t+1)/(C_sat(t+1))) + ŝ; ±inf past ±π/2 (full / empty sets)."""
    pid = ConformalPID(k_i=2.0, c_sat=1.0, q0=0.3)
    assert pid.threshold().item() == 0.3  # t = 0: no integral yet
    pid.steps.fill_(9)
    pid.err_sum.fill_(1.5)
    pid.scorecast.fill_(0.25)
    x = 1.5 * math.log(10) / 10
    assert pid.threshold().item() == pytest.approx(0.3 + 2.0 * math.tan(x) + 0.25)
    pid.err_sum.fill_(math.pi / 2 * 10 / math.log(10) + 1e-9)
    assert pid.threshold().item() == math.inf
    assert torch.isinf(pid.predict_set(torch.zeros(3)).size()).all()
    pid.update(1e12)  # covered by the whole line: err = 0
    assert float(pid.err_sum) == pytest.approx(math.pi / 2 * 10 / math.log(10) - ALPHA)
    pid.err_sum.fill_(-100.0)
    assert pid.threshold().item() == -math.inf
    for t in (1, 2, 3, 50):  # H_T = max_{1 <= s < T} h(s), closed form in pid_bound
        h = max(((math.pi / 2) * 0.3 * (s + 1) / math.log(s + 1) for s in range(1, t)), default=0.0)
        assert pid_bound(t, ALPHA, 0.3) == pytest.approx((h + 0.9) / t)
    assert pid.predict_set(torch.zeros(2)).size().tolist() == [0.0, 0.0]  # empty set -> degenerate interval


def test_scorecaster_hook_and_adversarial_forecasts() -> None:
    """The hook sees the last `window` scores; its forecast enters q_{t+1}; wild forecasts keep the bound."""
    seen: list[torch.Tensor] = []

    def last_plus_one(recent: torch.Tensor) -> float:
        seen.append(recent)
        return recent[-1].item() + 1.0

    pid = ConformalPID(k_i=0.0, lr=1e-9, window=3, scorecaster=last_plus_one)
    for s in (1.0, 2.0, 3.0, 4.0):
        pid.update(s)
    assert [r.tolist() for r in seen] == [[1.0], [1.0, 2.0], [1.0, 2.0, 3.0], [2.0, 3.0, 4.0]]
    assert pid.threshold().item() == pytest.approx(float(pid.q) + 5.0)
    flip = iter(range(10**6))

    def adversary(recent: torch.Tensor) -> float:
        return 1e3 * (-1) ** next(flip)

    g = torch.Generator().manual_seed(4)
    for t in TS:
        pid = ConformalPID(lr=0.05, k_i=1.0, c_sat=0.1, window=20, scorecaster=adversary)
        err, _ = _run(pid, regime_switch(t, g))
        assert abs(err.mean().item() - ALPHA) <= pid_bound(t, ALPHA, 0.1)
    with pytest.raises(ValueError, match="scorecast"):
        ConformalPID(window=2, scorecaster=lambda r: math.nan).update(1.0)
    with pytest.raises(ValueError, match="window"):
        ConformalPID(scorecaster=last_plus_one)


@pytest.mark.parametrize("stream", ["bounded", "switch", "heavy"])
@pytest.mark.parametrize("lr_over_b", [0.5, 1.0])
def test_sf_ogd_long_run_bound(stream: str, lr_over_b: float) -> None:
    """Scores in [0, B], q_1 ∈ [0, B]: |mean err - α| <= (B + η/|g_1|)(2√G_T - |g_1|)/(ηT), several T."""
    g = torch.Generator().manual_seed(int(10 * lr_over_b) + len(stream))
    for t in TS:
        scores = {"bounded": _bounded, "switch": regime_switch, "heavy": heavy_tailed}[stream]
        scores = scores(t) if stream == "bounded" else scores(t, g)
        b = scores.max().item()  # the bound is pathwise: B = max of the realised stream
        cal = SFOGD("absolute", ALPHA, lr=lr_over_b * b, q0=0.0)
        err, qs = _run(cal, scores)
        g1 = ALPHA - err[0].item()
        bound = sf_ogd_bound(t, ALPHA, cal.lr, b, float(cal.grad_sq), g1)
        assert abs(err.mean().item() - ALPHA) <= bound, (t, err.mean().item(), bound)
        closed = 2 * (b + cal.lr / min(ALPHA, 1 - ALPHA)) * max(ALPHA, 1 - ALPHA) / (cal.lr * math.sqrt(t))
        assert bound <= closed
        eta1 = cal.lr / abs(g1)
        assert qs.min() >= -ALPHA * eta1 - 1e-9 and qs.max() <= b + (1 - ALPHA) * eta1 + 1e-9
    # Informative at T = 5000; the bounded stream opens with a covered step (g_1 = α, first step η/α).
    assert bound < (0.11 if stream == "bounded" else 0.03)


def test_sf_ogd_is_scale_free() -> None:
    """Scaling scores, η and q_1 by 8 (exact in binary) scales every threshold by 8 and keeps every error."""
    scores = heavy_tailed(1000, torch.Generator().manual_seed(6))
    err, qs = _run(SFOGD(lr=2.0, q0=1.0), scores)
    err8, qs8 = _run(SFOGD(lr=16.0, q0=8.0), 8 * scores)
    assert torch.equal(err, err8) and torch.equal(8 * qs, qs8)
    cal = SFOGD(lr=1.0, q0=0.0).update(2.0)  # miss: g = -0.9, G = 0.81, q = 0 + 0.9/0.9
    assert float(cal.q) == pytest.approx(1.0) and float(cal.grad_sq) == pytest.approx(0.81)


@pytest.mark.parametrize("kind", ["pid", "pid_scorecaster", "sf_ogd"])
def test_round_trips_mid_stream(kind: str) -> None:
    """to_dict -> JSON -> from_dict and state_dict restore a running calibrator exactly."""
    scores = heavy_tailed(80, torch.Generator().manual_seed(3)).tolist()

    def mean_caster(recent: torch.Tensor) -> float:
        return recent.mean().item()

    kwargs = {
        "pid": {"lr": 0.1, "k_i": 2.0, "c_sat": 0.5, "window": 10},
        "pid_scorecaster": {"lr": 0.1, "window": 5, "scorecaster": mean_caster},
        "sf_ogd": {"lr": 3.0},
    }[kind]
    cls = SFOGD if kind == "sf_ogd" else ConformalPID
    cal = cls(**kwargs)
    for s in scores[:40]:
        cal.update(s)
    d = json.loads(json.dumps(cal.to_dict()))
    assert CALIBRATORS[d["method"]] is cls
    via_state = cls(**kwargs)
    via_state.load_state_dict(cal.state_dict())
    extra = {"scorecaster": mean_caster} if kind == "pid_scorecaster" else {}
    copies = [cls.from_dict(d, **extra), via_state]
    if not extra:
        copies.append(calibrator_from_dict(d))
    for s in scores[40:]:
        q = cal.threshold().item()
        assert all(c.threshold().item() == q for c in copies)
        for c in [cal, *copies]:
            c.update(s)


def _pid_dict() -> dict:
    return ConformalPID(window=3).update(1.0).update(2.0).to_dict()


@pytest.mark.parametrize(
    ("patch", "match"),
    [
        ({"k_i": -1.0}, "k_i"),
        ({"c_sat": 0.0}, "c_sat"),
        ({"window": 0}, "window"),
        ({"steps": -1}, "steps"),
        ({"steps": 1.5}, "steps"),
        ({"err_sum": math.inf}, "err_sum"),
        ({"scorecast": None}, "scorecast"),
        ({"recent": [1.0, 2.0, 3.0, 4.0]}, "more than window"),
        ({"recent": [math.nan]}, "finite"),
        ({"scorecaster": True}, "scorecaster"),
        ({"method": "sf_ogd"}, "method"),
        ({"extra": 0}, "unexpected"),
    ],
)
def test_pid_malformed_dict(patch: dict, match: str) -> None:
    """Each malformed PID field raises ValueError naming it."""
    with pytest.raises(ValueError, match=match):
        ConformalPID.from_dict(_pid_dict() | patch)


def test_sf_ogd_malformed_and_bad_updates() -> None:
    """Malformed SF-OGD dicts and non-finite scores raise ValueError; a stray callable is refused."""
    d = SFOGD().update(1.0).to_dict()
    for patch, match in [({"grad_sq": -1.0}, "grad_sq"), ({"lr": 0.0}, "lr"), ({"q": math.nan}, "q0")]:
        with pytest.raises(ValueError, match=match):
            calibrator_from_dict(d | patch)
    for bad in (math.inf, True, torch.tensor([1.0, 2.0])):
        with pytest.raises(ValueError, match="score"):
            SFOGD().update(bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="score"):
            ConformalPID().update(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="scorecaster"):
        ConformalPID.from_dict(_pid_dict(), scorecaster=lambda r: 0.0)
