"""Mondrian (group-conditional) conformal, the CQR score, Box sets and group-coverage metrics."""

from __future__ import annotations

import json
import math

import pytest
import torch

from sciml.uq import (
    CALIBRATORS,
    CQR,
    Box,
    Interval,
    MondrianConformal,
    PredictionSet,
    SplitConformal,
    calibrator_from_dict,
    conformal_quantile,
    conformal_rank,
    group_coverage,
    set_size,
    worst_group_coverage,
)

torch.set_num_threads(1)
SIZES, SIGMAS = (9, 15, 30), (0.1, 1.0, 10.0)  # k_g/(n_g+1) at alpha=0.1: 9/10, 15/16, 28/31


def _beta_se(n: int, alpha: float, m: int, trials: int) -> tuple[float, float]:
    """Mean k/(n+1) and SE of the trial-averaged coverage: Var = Var(Beta(k, n+1-k)) + (p(1-p) - Var)/m."""
    k = conformal_rank(n, alpha)
    p, var_c = k / (n + 1), k * (n + 1 - k) / ((n + 1) ** 2 * (n + 2))
    return p, math.sqrt((var_c + (p * (1 - p) - var_c) / m) / trials)


def test_per_group_coverage_with_different_noise() -> None:
    """Each group covers k_g/(n_g+1) within 3 SE; one pooled threshold does not (negative control)."""
    trials, m, alpha = 1000, 20, 0.1
    g = torch.Generator().manual_seed(0)
    gc = torch.cat([torch.full((n,), i) for i, n in enumerate(SIZES)])
    gt = torch.arange(3).repeat_interleave(m)
    sc, st = torch.tensor(SIGMAS)[gc].double(), torch.tensor(SIGMAS)[gt].double()
    mondrian, pooled = torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    for _ in range(trials):
        pred_c, pred_t = (
            torch.randn(gc.numel(), generator=g).double(),
            torch.randn(gt.numel(), generator=g).double(),
        )
        y_c = pred_c + sc * torch.randn(gc.numel(), generator=g, dtype=torch.float64)
        y_t = pred_t + st * torch.randn(gt.numel(), generator=g, dtype=torch.float64)
        cal = MondrianConformal("absolute", alpha).fit_predictions(pred_c, y_c, gc)
        mondrian += group_coverage(cal.predict_set(pred_t, gt), y_t, gt)[1]
        split = SplitConformal("absolute", alpha).fit_predictions(pred_c, y_c)
        pooled += group_coverage(split.predict_set(pred_t), y_t, gt)[1]
    for i, n in enumerate(SIZES):
        p, se = _beta_se(n, alpha, m, trials)
        assert abs(mondrian[i].item() / trials - p) <= 3 * se, (i, mondrian[i] / trials, p, se)
    p2, se2 = _beta_se(SIZES[2], alpha, m, trials)
    assert pooled[2].item() / trials < p2 - 10 * se2  # the noisy group under-covers with a pooled threshold
    assert pooled[0].item() / trials > 0.999  # and the quiet group gets needlessly wide intervals


def test_small_group_gets_infinite_threshold_and_unknown_group_is_named() -> None:
    """A group with n_g < 1/alpha - 1 gives +inf; group labels may be any integers; unknown -> ValueError."""
    scores = torch.tensor([1.0, 2.0, 3.0] + [float(i) for i in range(20)])
    groups = torch.tensor([-5] * 3 + [1000] * 20)
    cal = MondrianConformal(alpha=0.1).fit(scores, groups)
    assert cal.group_ids.tolist() == [-5, 1000] and cal.counts.tolist() == [3, 20]
    assert cal.threshold().tolist() == [math.inf, 18.0]  # k = ceil(21 * 0.9) = 19 -> 19th smallest of 0..19
    assert cal.threshold(torch.tensor([1000, -5, 1000])).tolist() == [18.0, math.inf, 18.0]
    iv = cal.predict_set(torch.zeros(2), torch.tensor([-5, 1000]))
    assert iv.size().tolist() == [math.inf, 36.0]
    with pytest.raises(ValueError, match=r"unknown group\(s\) \[7\]"):
        cal.predict_set(torch.zeros(2), torch.tensor([7, 1000]))
    with pytest.raises(RuntimeError, match="fit"):
        MondrianConformal().threshold()


@pytest.mark.parametrize(
    "groups",
    [torch.zeros(4), torch.zeros(4, dtype=torch.bool), torch.zeros(3, dtype=torch.long), torch.zeros(2, 2)],
)
def test_fit_rejects_bad_groups(groups: torch.Tensor) -> None:
    """Float, bool or mis-shaped group labels raise ValueError."""
    with pytest.raises(ValueError, match="groups"):
        MondrianConformal().fit(torch.rand(4), groups)


def _fitted() -> MondrianConformal:
    g = torch.Generator().manual_seed(1)
    return MondrianConformal("normalized", 0.2).fit(
        torch.rand(40, generator=g), torch.randint(0, 4, (40,), generator=g)
    )


def test_dict_and_state_dict_round_trips() -> None:
    """to_dict -> JSON -> from_dict and state_dict give identical thresholds; registered as 'mondrian'."""
    cal = _fitted()
    d = json.loads(json.dumps(cal.to_dict()))
    assert CALIBRATORS["mondrian"] is MondrianConformal and d["method"] == "mondrian"
    for new in (MondrianConformal.from_dict(d), calibrator_from_dict(d)):
        assert isinstance(new, MondrianConformal) and new.score_name == "normalized" and new.alpha == 0.2
        for alpha in (None, 0.05, 0.5):
            assert new.threshold(alpha=alpha).tolist() == cal.threshold(alpha=alpha).tolist()
    for fresh in (
        MondrianConformal("normalized", 0.2),
        MondrianConformal("normalized", 0.2).fit(torch.rand(3), torch.arange(3)),
    ):
        fresh.load_state_dict(cal.state_dict())
        assert torch.equal(fresh.threshold(), cal.threshold()) and torch.equal(fresh.group_ids, cal.group_ids)
    bad = cal.state_dict() | {"counts": cal.counts + 1}
    with pytest.raises(RuntimeError, match="inconsistent"):
        MondrianConformal().load_state_dict(bad)


@pytest.mark.parametrize(
    ("patch", "match"),
    [
        ({"method": "split"}, "method"),
        ({"score": "huber"}, "score"),
        ({"alpha": 0.0}, "alpha"),
        ({"groups": [0, 0]}, "distinct"),
        ({"groups": [0, 1.5]}, "integers"),
        ({"groups": []}, "groups"),
        ({"scores": [[0.1]]}, "one list"),
        ({"scores": [[0.1], []]}, "empty"),
        ({"scores": [[0.1], [math.nan]]}, "finite"),
        ({"scores": [[0.1], "0.2"]}, "list"),
        ({"extra": 1}, "unexpected"),
    ],
)
def test_malformed_dict_raises(patch: dict, match: str) -> None:
    """Each malformed field raises ValueError naming the problem."""
    d = {"method": "mondrian", "score": "absolute", "alpha": 0.1, "groups": [0, 1], "scores": [[0.1], [0.2]]}
    with pytest.raises(ValueError, match=match):
        MondrianConformal.from_dict(d | patch)
    with pytest.raises(ValueError, match="missing"):
        MondrianConformal.from_dict({k: v for k, v in d.items() if k != "groups"})


def test_cqr_scores_and_intervals_by_hand() -> None:
    """CQR score max(lo - y, y - hi), interval [lo - q, hi + q]; empty sets collapse to the midpoint."""
    pred = torch.tensor([[0.0, 1.0], [2.0, 4.0]])
    torch.testing.assert_close(CQR().score(pred, torch.tensor([0.5, 5.0])), torch.tensor([-0.5, 1.0]))
    for q, lo, hi in [
        (0.5, [-0.5, 1.5], [1.5, 4.5]),
        (-0.25, [0.25, 2.25], [0.75, 3.75]),
        (-1.0, [0.5, 3.0], [0.5, 3.0]),
    ]:
        iv = CQR().predict_set(pred, q)
        assert iv.lower.tolist() == lo and iv.upper.tolist() == hi
    assert CQR().interval(pred, -math.inf).lower.tolist() == [0.5, 3.0]
    assert torch.isinf(CQR().interval(pred, math.inf).size()).all()
    with pytest.raises(ValueError, match="NaN"):
        CQR().interval(pred, math.nan)
    with pytest.raises(ValueError, match=r"\(\.\.\., 2\)"):
        CQR().score(torch.zeros(2, 3), torch.zeros(2))


def test_cqr_split_coverage() -> None:
    """Split conformal on CQR scores of too-narrow quantile bands covers k/(n+1) within 3 SE."""
    trials, n, m, alpha = 1000, 30, 50, 0.1
    g = torch.Generator().manual_seed(2)
    x = torch.rand(trials, n + m, generator=g, dtype=torch.float64)
    y = x + (0.1 + x) * torch.randn(trials, n + m, generator=g, dtype=torch.float64)
    pred = torch.stack([x - 0.5 * (0.1 + x), x + 0.5 * (0.1 + x)], dim=-1)  # ~38% bands, need widening
    q = conformal_quantile(CQR().score(pred[:, :n], y[:, :n]), alpha)
    cov = CQR().interval(pred[:, n:], q[:, None]).contains(y[:, n:]).double().mean().item()
    p, se = _beta_se(n, alpha, m, trials)
    assert abs(cov - p) <= 3 * se, (cov, p, se)


def test_box_contains_all_dims_and_log_volume() -> None:
    """Box membership needs every component; size is the log-volume with ±inf edge cases."""
    box = Box(
        torch.tensor([[0.0, 0.0, 0.0], [0.0, -math.inf, 0.0], [0.0, 0.0, 1.0]]),
        torch.tensor([[1.0, 2.0, 4.0]] * 3),
    )
    assert isinstance(box, PredictionSet)
    y = torch.tensor([[0.5, 2.0, 0.0], [1.0, -1e9, 4.0], [0.5, 0.5, 0.5]])
    assert box.contains(y).tolist() == [True, True, False]
    size = box.size()
    assert size[0].item() == pytest.approx(math.log(8.0)) and size[1].item() == math.inf
    assert size[2].item() == pytest.approx(math.log(6.0))
    flat = Box(torch.tensor([[0.0, -math.inf]]), torch.tensor([[0.0, math.inf]]))
    assert flat.size().item() == -math.inf  # zero width wins over unbounded: measure zero
    assert set_size(Box(torch.zeros(2, 2), torch.full((2, 2), math.e))).item() == pytest.approx(2.0)
    with pytest.raises(ValueError, match="lower > upper"):
        Box(torch.ones(1, 2), torch.zeros(1, 2))
    with pytest.raises(ValueError, match=r"\(\.\.\., d\)"):
        Box(torch.tensor(0.0), torch.tensor(1.0))
    with pytest.raises(ValueError, match="shape"):
        box.contains(torch.zeros(3, 2))


def test_group_coverage_by_hand() -> None:
    """Per-group coverage averages inside each group; (m, d) intervals average over entries too."""
    iv = Interval(torch.zeros(5), torch.ones(5))
    y = torch.tensor([0.5, 2.0, 0.5, 0.5, -1.0])
    ids, cov = group_coverage(iv, y, torch.tensor([3, 3, 1, 1, 1]))
    assert ids.tolist() == [1, 3] and cov.tolist() == pytest.approx([2 / 3, 0.5])
    assert worst_group_coverage(iv, y, torch.tensor([3, 3, 1, 1, 1])).item() == 0.5
    iv2 = Interval(torch.zeros(2, 2), torch.ones(2, 2))
    _, cov2 = group_coverage(iv2, torch.tensor([[0.5, 2.0], [0.5, 0.5]]), torch.tensor([0, 1]))
    assert cov2.tolist() == [0.5, 1.0]
    with pytest.raises(ValueError, match="groups"):
        group_coverage(iv, y, torch.zeros(4, dtype=torch.long))
