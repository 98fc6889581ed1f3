"""COP and UP-OCP (reconstruction): long-run miscoverage bounds on adversarial streams, state round trips."""

from __future__ import annotations

import json

import pytest
import torch

from sciml.testing.streams import drift, heavy_tailed, regime_switch
from sciml.uq import COP, UPOCP, calibrator_from_dict, cop_bound

torch.set_num_threads(1)
ALPHA, TS = 0.1, (500, 2000, 5000)


def _run(cal, scores: torch.Tensor) -> tuple[float, list[float]]:
    """Predict with q_t (through predict_set), reveal s_t, update; return mean err and the COP step path."""
    errs, steps = [], []
    for s in scores.tolist():
        band = cal.predict_set(torch.zeros(1, dtype=torch.float64))
        errs.append(not bool(band.contains(torch.tensor([s], dtype=torch.float64))))
        if isinstance(cal, COP):
            steps.append(cal.step_size())
        cal.update(s)
    return sum(errs) / len(errs), steps


@pytest.mark.parametrize("stream", [regime_switch, drift, heavy_tailed])
def test_cop_long_run_bound(stream) -> None:
    """|mean err - α| <= M(1/η_T + Σ|1/η_t - 1/η_{t+1}|)/T (cop.py docstring), for several T."""
    for t in TS:
        scores = stream(t, torch.Generator().manual_seed(t))
        err, steps = _run(COP("absolute", ALPHA, lr=0.1, window=100), scores)
        bound = cop_bound(torch.tensor(steps), float(scores.max()), ratio=0.5)
        assert abs(err - ALPHA) <= bound


def test_cop_bound_informative_on_bounded_stream() -> None:
    """On U(0, 1) scores the window range is stable, so the path bound is small and still holds."""
    for t in TS:
        scores = torch.rand(t, generator=torch.Generator().manual_seed(t), dtype=torch.float64)
        err, steps = _run(COP("absolute", ALPHA, lr=0.5, window=100), scores)
        bound = cop_bound(torch.tensor(steps), 1.0, ratio=0.5)
        assert abs(err - ALPHA) <= bound
        assert bound < 10 / t ** 0.5  # ≈ (B + 3η)/(ηT) plus the range jitter


@pytest.mark.parametrize("stream", [regime_switch, drift, heavy_tailed])
def test_up_ocp_long_run_bound(stream) -> None:
    """|mean err - α| <= 2 max(α,1-α) √((log(1+T B/W0) + L + T/G²)/T) (up_ocp.py docstring), several T."""
    for t in TS:
        scores = stream(t, torch.Generator().manual_seed(t + 1))
        cal = UPOCP("absolute", ALPHA, q0=0.0, wealth0=1.0)
        err, _ = _run(cal, scores)
        bound = cal.bound(t, float(scores.max()))
        assert abs(err - ALPHA) <= bound
        if t == 5000:
            assert bound < 0.2  # not vacuous at the longest horizon


def test_cop_constant_step_bound_matches_closed_form() -> None:
    """With constant steps the path bound is (B + 2(1+r)η)/(ηT)."""
    steps = torch.full((100,), 0.3, dtype=torch.float64)
    assert cop_bound(steps, 2.0, 0.5) == pytest.approx((2.0 + 3 * 0.3) / (0.3 * 100))


def test_cop_hint_is_optimistic() -> None:
    """After a full window the threshold moves against the ECDF excess: q < q̂ when F̂(q̂) > 1-α."""
    cop = COP("absolute", ALPHA, lr=0.1, window=10, q0=100.0)
    for s in range(10):
        cop.update(float(s))
    assert float(cop.hint) > 0 and float(cop.threshold()) < float(cop.q)
    assert float(cop.hint) == pytest.approx(0.5 * cop.step_size() * (1 - (1 - ALPHA)))


@pytest.mark.parametrize("make", [lambda: COP("cqr", ALPHA, lr=0.2, window=5), lambda: UPOCP("absolute", 0.2)])
def test_online_round_trip(make) -> None:
    """to_dict → JSON → calibrator_from_dict and state_dict reload continue the same threshold path."""
    g = torch.Generator().manual_seed(3)
    first = make()
    for s in torch.randn(30, generator=g).tolist():
        first.update(s)
    second = calibrator_from_dict(json.loads(json.dumps(first.to_dict())))
    third = make()
    third.load_state_dict(first.state_dict())
    for s in torch.randn(20, generator=g).tolist():
        assert float(first.threshold()) == float(second.threshold()) == float(third.threshold())
        for cal in (first, second, third):
            cal.update(s)


def test_bad_arguments() -> None:
    """Clear errors for a bad window, ratio, wealth or grid; a bool is not a score."""
    with pytest.raises(ValueError, match="window"):
        COP(window=1)
    with pytest.raises(ValueError, match="ratio"):
        COP(ratio=-1.0)
    with pytest.raises(ValueError, match="wealth0"):
        UPOCP(wealth0=0.0)
    with pytest.raises(ValueError, match="grid"):
        UPOCP(grid=3)
    with pytest.raises(ValueError, match="bool"):
        UPOCP().update(True)
    with pytest.raises(ValueError, match="log_weights"):
        UPOCP.from_dict(UPOCP(grid=10).to_dict() | {"log_weights": [0.0]})
