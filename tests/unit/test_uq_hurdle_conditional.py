"""Class-wise coverage of the hurdle calibrator and group-wise coverage of conditional calibration.

Tolerances: a coverage estimate from ``m`` test points has standard deviation ``sqrt(p(1-p)/m)`` (0.0067 at
``m = 2000``, ``p = 0.9``); the calibration sets add a finite-sample spread of the same order. Checks allow 4
standard deviations of both together, with fixed seeds.
"""

from __future__ import annotations

import math

import pytest
import torch

from sciml.uq import (
    ConditionalConformal,
    ConditionalHurdleConformal,
    HurdleConformal,
    MultiGroupConformal,
    calibrator_from_dict,
)

ALPHA = 0.1


def _tol(n_cal: int, n_test: int) -> float:
    p = 1 - ALPHA
    return 4 * math.sqrt(p * (1 - p) * (1 / n_cal + 1 / n_test))


def _zero_inflated(n: int, gen: torch.Generator):
    """A hurdle model's outputs and targets: metals (y = 0) with a noisy p0, gaps with heteroscedastic noise."""
    logit = torch.randn(n, generator=gen, dtype=torch.float64) * 2
    p_zero = torch.sigmoid(logit)
    zero = torch.rand(n, generator=gen, dtype=torch.float64) < p_zero
    value = torch.rand(n, generator=gen, dtype=torch.float64) * 4
    y = torch.where(zero, torch.zeros_like(value),
                    (value + 0.5 * torch.randn(n, generator=gen, dtype=torch.float64)).clamp_min(0.01))
    return p_zero, value, y


def test_hurdle_covers_zeros_and_positives_separately():
    gen = torch.Generator().manual_seed(0)
    cal = HurdleConformal(ALPHA).fit(*_zero_inflated(3000, gen))
    p_zero, value, y = _zero_inflated(20000, gen)
    interval = cal.predict_set(p_zero, value)
    assert (interval.lower >= 0).all() and (interval.upper >= interval.lower).all()
    covered = interval.contains(y)
    for rows, cal_rows in ((y <= 0, cal.y <= 0), (y > 0, cal.y > 0)):
        assert abs(float(covered[rows].double().mean()) - (1 - ALPHA)) < _tol(int(cal_rows.sum()), int(rows.sum()))


def test_hurdle_point_lies_in_its_interval():
    gen = torch.Generator().manual_seed(3)
    cal = HurdleConformal(ALPHA).fit(*_zero_inflated(1000, gen))
    p_zero, value, _ = _zero_inflated(5000, gen)
    interval, point = cal.predict_set(p_zero, value), cal.point(p_zero, value)
    assert interval.contains(point).all()
    assert torch.equal(point == 0, (p_zero >= 0.5) & interval.zero)


def test_hurdle_roundtrip_and_bad_input():
    gen = torch.Generator().manual_seed(1)
    cal = HurdleConformal(ALPHA).fit(*_zero_inflated(500, gen))
    again = calibrator_from_dict(cal.to_dict())
    assert all(torch.equal(a, b) for a, b in zip(cal.thresholds(), again.thresholds(), strict=True))
    with pytest.raises(ValueError, match="y >= 0"):
        HurdleConformal().fit(torch.tensor([0.5]), torch.tensor([1.0]), torch.tensor([-1.0]))


def _grouped(n: int, gen: torch.Generator):
    """Scores whose scale depends on two overlapping groupings (a: 3 values, b: 2 values)."""
    a = torch.randint(0, 3, (n,), generator=gen)
    b = torch.randint(0, 2, (n,), generator=gen)
    scale = torch.tensor([0.5, 1.0, 2.0])[a] * torch.tensor([1.0, 3.0])[b]
    scores = (torch.randn(n, generator=gen, dtype=torch.float64) * scale).abs()
    members = torch.stack([a == 0, a == 1, a == 2, b == 0, b == 1], dim=1)
    return scores, members


def test_conditional_covers_every_group_without_the_max_over_coverage():
    gen = torch.Generator().manual_seed(2)
    scores, members = _grouped(6000, gen)
    columns = [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]
    conditional = ConditionalConformal(alpha=ALPHA).fit(scores, members, columns)
    multigroup = MultiGroupConformal(alpha=ALPHA).fit(scores, members, columns)
    test_scores, test_members = _grouped(20000, gen)
    q_cond, q_multi = conditional.threshold(test_members), multigroup.threshold(test_members)
    for g in range(members.shape[1]):
        rows = test_members[:, g]
        n_cal = int(members[:, g].sum())
        cov = float((test_scores[rows] <= q_cond[rows]).double().mean())
        # d = 6 indicators: the split fit's slack is O(d / n_g), far inside the tolerance at n_g ~ 2000
        assert abs(cov - (1 - ALPHA)) < _tol(n_cal, int(rows.sum())) + 6 / n_cal
    # the max over groups over-covers where the groupings disagree; conditional calibration does not
    overall_multi = float((test_scores <= q_multi).double().mean())
    overall_cond = float((test_scores <= q_cond).double().mean())
    assert overall_multi > overall_cond + 0.01
    again = calibrator_from_dict(conditional.to_dict())
    assert torch.allclose(again.threshold(test_members[:50]), q_cond[:50])


def _grouped_zero_inflated(n: int, gen: torch.Generator):
    """Hurdle outputs whose gap noise and metal share depend on overlapping groupings (a: 3 values, b: 2)."""
    p_zero, value, _ = _zero_inflated(n, gen)
    a = torch.randint(0, 3, (n,), generator=gen)
    b = torch.randint(0, 2, (n,), generator=gen)
    scale = torch.tensor([0.1, 0.5, 1.5], dtype=torch.float64)[a] * torch.tensor([1.0, 2.0], dtype=torch.float64)[b]
    zero = torch.rand(n, generator=gen, dtype=torch.float64) < p_zero
    y = torch.where(zero, torch.zeros_like(value),
                    (value + scale * torch.randn(n, generator=gen, dtype=torch.float64)).clamp_min(0.01))
    return p_zero, value, y, torch.stack([a == 0, a == 1, a == 2, b == 0, b == 1], dim=1)


def test_grouped_hurdle_covers_every_group_and_class():
    gen = torch.Generator().manual_seed(4)
    p_zero, value, y, members = _grouped_zero_inflated(6000, gen)
    columns = [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]
    grouped = ConditionalHurdleConformal(ALPHA, ["a", "b"]).fit(p_zero, value, y, members, columns)
    plain = HurdleConformal(ALPHA).fit(p_zero, value, y)
    tp, tv, ty, tm = _grouped_zero_inflated(20000, gen)
    interval = grouped.predict_set(tp, tv, members=tm)
    assert (interval.lower >= 0).all() and (interval.upper >= interval.lower).all()
    covered = interval.contains(ty)
    plain_covered = plain.predict_set(tp, tv).contains(ty)
    worst_plain = 0.0
    for g in range(members.shape[1]):
        rows, n_cal = tm[:, g], int(members[:, g].sum())
        # each class is fitted with d <= 6 indicators: over-coverage at most d / n_g on top of the sampling tolerance
        assert abs(float(covered[rows].double().mean()) - (1 - ALPHA)) < _tol(n_cal, int(rows.sum())) + 6 / n_cal
        worst_plain = max(worst_plain, abs(float(plain_covered[rows].double().mean()) - (1 - ALPHA)))
    assert worst_plain > 0.05  # the groups differ: one half-width for all of them misses some
    for rows, cal_rows in ((ty <= 0, y <= 0), (ty > 0, y > 0)):
        n_cal = int(cal_rows.sum())
        assert abs(float(covered[rows].double().mean()) - (1 - ALPHA)) < _tol(n_cal, int(rows.sum())) + 6 / n_cal
    point = grouped.point(tp, tv, members=tm)
    assert interval.contains(point).all()
    again = calibrator_from_dict(grouped.to_dict())
    assert torch.equal(again.predict_set(tp[:50], tv[:50], members=tm[:50]).upper, interval.upper[:50])


def test_grouped_hurdle_needs_memberships():
    gen = torch.Generator().manual_seed(5)
    p_zero, value, y, members = _grouped_zero_inflated(300, gen)
    with pytest.raises(ValueError, match="memberships"):
        ConditionalHurdleConformal(ALPHA, ["a", "b"]).fit(p_zero, value, y)
    cal = ConditionalHurdleConformal(ALPHA, ["a", "b"]).fit(p_zero, value, y, members)
    with pytest.raises(ValueError, match="memberships"):
        cal.predict_set(p_zero, value)
    with pytest.raises(ValueError, match="groups"):
        cal.predict_set(p_zero, value, members=members[:, :2])
    with pytest.raises(ValueError, match="no groups"):
        HurdleConformal(ALPHA).fit(p_zero, value, y).predict_set(p_zero, value, members=members)


def test_loaded_conditional_calibrators_solve_no_linear_programme(monkeypatch):
    import sciml.uq.conditional as conditional  # both calibrators solve through its quantile_regression

    gen = torch.Generator().manual_seed(6)
    p_zero, value, y, members = _grouped_zero_inflated(2000, gen)
    columns = [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]
    hurdle = ConditionalHurdleConformal(ALPHA, ["a", "b"]).fit(p_zero, value, y, members, columns)
    scores, _ = _grouped(2000, gen)
    plain = ConditionalConformal(alpha=ALPHA).fit(scores, members, columns)
    saved = [hurdle.to_dict(), plain.to_dict()]
    expected = [hurdle.predict_set(p_zero, value, members=members).upper, plain.threshold(members)]

    def refuse(*args):
        raise AssertionError("a loaded calibrator solved a linear programme at its default alpha")

    monkeypatch.setattr(conditional, "quantile_regression", refuse)
    loaded = [calibrator_from_dict(d) for d in saved]
    assert torch.equal(loaded[0].predict_set(p_zero, value, members=members).upper, expected[0])
    assert torch.equal(loaded[1].threshold(members), expected[1])
    bad = dict(saved[1], coefficients={"0.1": [0.0]})
    with pytest.raises(ValueError, match="coefficients"):
        calibrator_from_dict(bad)


def test_a_positive_part_reaching_zero_does_not_cover_zeros():
    """Where gaps are small and metals common, ``[0, v + q]`` would hold 0 for nearly every metal; the set does not."""
    gen = torch.Generator().manual_seed(7)

    def draw(n):
        p_zero = torch.rand(n, generator=gen, dtype=torch.float64)
        value = 0.05 + 0.1 * torch.rand(n, generator=gen, dtype=torch.float64)  # gaps far below the half-width
        zero = torch.rand(n, generator=gen, dtype=torch.float64) < 0.7
        y = torch.where(zero, torch.zeros_like(value), value + torch.randn(n, generator=gen, dtype=torch.float64))
        return p_zero, value, y.abs()

    cal = HurdleConformal(ALPHA).fit(*draw(3000))
    p_zero, value, y = draw(20000)
    sets = cal.predict_set(p_zero, value)
    zero = y <= 0
    assert (sets.lower[zero] <= 0).float().mean() > 0.99  # the positive parts reach down to 0 ...
    covered = float(sets.contains(y)[zero].double().mean())  # ... yet the zeros are covered at 1 - α, not ~1
    assert abs(covered - (1 - ALPHA)) < _tol(int((cal.y <= 0).sum()), int(zero.sum()))


def test_augmented_threshold_is_the_conformal_quantile_of_each_disjoint_group():
    from sciml.uq.conditional import augmented_threshold
    from sciml.uq.quantile import conformal_quantile

    gen = torch.Generator().manual_seed(8)
    for n in (5, 9, 10, 57, 400):  # n < 9 at α = 0.1: too few points, no bound
        scores = torch.randn(n, generator=gen, dtype=torch.float64)
        phi = torch.ones(n, 1, dtype=torch.float64)
        assert augmented_threshold(phi, scores, torch.ones(1, dtype=torch.float64), ALPHA) == pytest.approx(
            float(conformal_quantile(scores, ALPHA)), abs=1e-9)
    group = torch.randint(0, 3, (600,), generator=gen)  # disjoint groups: Mondrian conformal, group by group
    scores = torch.randn(600, generator=gen, dtype=torch.float64) * (1 + group)
    phi = torch.nn.functional.one_hot(group, 3).double()
    for g in range(3):
        expected = float(conformal_quantile(scores[group == g], ALPHA))
        assert augmented_threshold(phi, scores, torch.eye(3, dtype=torch.float64)[g], ALPHA) == pytest.approx(
            expected, abs=1e-9)


def test_a_rare_membership_pattern_gets_the_class_wide_threshold():
    gen = torch.Generator().manual_seed(9)
    p_zero, value, y, members = _grouped_zero_inflated(3000, gen)
    # 3 calibration points with a = 2: too few for an indicator, and the intercept minus the indicators of a = 0 and
    # a = 1 isolates them, so the augmented fit at a = 2 is unbounded: the class-wide threshold instead
    rare = members[:, 2]
    keep = ~rare | (torch.cumsum(rare.long(), 0) <= 3)
    columns = [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]
    cal = ConditionalHurdleConformal(ALPHA, ["a", "b"]).fit(p_zero[keep], value[keep], y[keep], members[keep],
                                                            columns)
    cells = torch.tensor([[True, False, False, True, False], [False, False, True, False, True]])
    assert cal.class_wide(cells).tolist() == [False, True]
    t, q = cal.point_thresholds(cells)
    assert torch.isfinite(q).all()
    plain_t, _ = HurdleConformal(ALPHA).fit(p_zero[keep], value[keep], y[keep]).thresholds()
    assert float(t[1]) == pytest.approx(float(plain_t), abs=1e-9)  # the zeros' conformal quantile, all groups
    again = calibrator_from_dict(cal.to_dict())
    assert again.class_wide(cells).tolist() == [False, True]


def test_zero_or_interval_keeps_zero_apart_from_the_positive_part():
    from sciml.uq import ZeroOrInterval

    sets = ZeroOrInterval(torch.tensor([True, False, False]), torch.tensor([0.0, 0.0, 0.5]),
                          torch.tensor([1.0, 1.0, 1.0]))
    assert sets.contains(torch.tensor([0.0, 0.0, 0.0])).tolist() == [True, False, False]
    assert sets.contains(torch.tensor([0.3, 0.3, 0.3])).tolist() == [True, True, False]
    assert sets.size().tolist() == [1.0, 1.0, 0.5]
    with pytest.raises(ValueError, match="lower == 0"):
        ZeroOrInterval(torch.tensor([True]), torch.tensor([0.5]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="bool"):
        ZeroOrInterval(torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([1.0]))


def test_grouped_hurdle_without_indicators_is_the_plain_hurdle():
    """Groups too small for an indicator leave the intercept: the augmented fit is then the conformal quantile."""
    gen = torch.Generator().manual_seed(10)
    p_zero, value, y = _zero_inflated(400, gen)
    members = torch.rand(400, 2, generator=gen) < 0.1  # ~40 members each, below MIN_MEMBERS
    grouped = ConditionalHurdleConformal(ALPHA).fit(p_zero, value, y, members)
    plain = HurdleConformal(ALPHA).fit(p_zero, value, y)
    for a, b in zip(grouped.thresholds(), plain.thresholds(), strict=True):
        assert float(a) == pytest.approx(float(b), abs=1e-9)
