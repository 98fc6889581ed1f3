"""Worst-slab coverage: exact against brute force, finds a planted under-covered slab, held-out evaluation."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from sciml.uq import Box, Interval, Slab, coverage, worst_slab_coverage

torch.set_num_threads(1)
V_BAD = torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64) / math.sqrt(2)
A, B = 0.2, 0.9  # planted slab {A <= V_BAD·x <= B}: mass P(N(0,1) ∈ [0.2, 0.9]) = 0.237


def _planted(m: int, g: torch.Generator, bad: bool = True) -> tuple[Interval, torch.Tensor, torch.Tensor]:
    """x ~ N(0, I_3), y = 0; sets cover w.p. 0.95 outside the planted slab and 0.5 inside (0.95 if not bad)."""
    x = torch.randn(m, 3, generator=g, dtype=torch.float64)
    z = x @ V_BAD
    p = torch.where((z >= A) & (z <= B) & bad, 0.5, 0.95)
    hit = torch.rand(m, generator=g, dtype=torch.float64) < p
    lower = torch.where(hit, -1.0, 1.0).double()  # [-1, 1] contains y = 0, [1, 2] does not
    return Interval(lower, lower + torch.where(hit, 2.0, 1.0).double()), torch.zeros(m, dtype=torch.float64), x


def _brute(covered: torch.Tensor, x: torch.Tensor, directions: torch.Tensor, delta: float) -> float:
    best = math.inf
    for v in directions / directions.norm(dim=-1, keepdim=True):
        z = x @ v
        for a, b in itertools.combinations_with_replacement(sorted(set(z.tolist())), 2):
            inside = (z >= a) & (z <= b)
            if inside.sum() >= math.ceil(delta * len(z) - 1e-9):
                best = min(best, covered[inside].mean().item())
    return best


@pytest.mark.parametrize("ties", [False, True])
def test_matches_brute_force_over_all_slabs(ties: bool) -> None:
    """The O(m²) window search equals enumerating every slab [a, b] (ties in vᵀx never split)."""
    g = torch.Generator().manual_seed(int(ties))
    for _ in range(6):
        m = int(torch.randint(8, 30, (1,), generator=g))
        x = torch.randn(m, 2, generator=g, dtype=torch.float64)
        x = (2 * x).round() / 2 if ties else x
        y = torch.randn(m, generator=g, dtype=torch.float64)
        iv = Interval(torch.full((m,), -1.0, dtype=torch.float64), torch.ones(m, dtype=torch.float64))
        dirs = torch.randn(3, 2, generator=g, dtype=torch.float64)
        slab = worst_slab_coverage(iv, y, x, delta=0.3, directions=dirs)
        assert slab.coverage == pytest.approx(_brute(iv.contains(y).double(), x, dirs, 0.3), abs=1e-12)
        assert slab.mass >= 0.3 and slab.lower <= slab.upper
        assert iv.contains(y)[slab.contains(x)].double().mean().item() == pytest.approx(slab.coverage)


def test_finds_the_planted_bad_slab() -> None:
    """Marginal coverage ~0.84 hides a slab covering ~0.5; WSC finds it along the planted direction."""
    g = torch.Generator().manual_seed(0)
    iv, y, x = _planted(1000, g)
    z = x @ V_BAD
    planted = (z >= A) & (z <= B)
    inside_cov = iv.contains(y)[planted].double().mean().item()
    assert coverage(iv, y).item() > 0.8 and inside_cov < 0.6
    axes = torch.cat([torch.eye(3, dtype=torch.float64), V_BAD[None]])
    exact = worst_slab_coverage(iv, y, x, delta=0.2, directions=axes)
    torch.testing.assert_close(exact.direction, V_BAD)
    assert exact.coverage <= inside_cov
    assert A - 0.15 <= exact.lower and exact.upper <= B + 0.15, (exact.lower, exact.upper)
    random = worst_slab_coverage(iv, y, x, delta=0.2, n_directions=300, generator=g)
    in_planted = planted[random.contains(x)].double().mean().item()
    assert random.coverage < 0.65 and in_planted > 0.7, (random.coverage, in_planted)
    assert abs(random.direction @ V_BAD) > 0.9  # close to ±V_BAD
    # Held out: the slab found on one sample still under-covers on a fresh one.
    iv2, y2, x2 = _planted(4000, g)
    assert random.coverage_on(iv2, y2, x2) < 0.7


def test_no_bad_slab_held_out_coverage_is_marginal() -> None:
    """Without a planted slab the in-sample minimum is optimistic (0.915 here), the held-out value ~0.95."""
    g = torch.Generator().manual_seed(1)
    iv, y, x = _planted(1000, g, bad=False)
    slab = worst_slab_coverage(iv, y, x, delta=0.2, n_directions=100, generator=g)
    iv2, y2, x2 = _planted(20_000, g, bad=False)
    held_out = slab.coverage_on(iv2, y2, x2)
    assert slab.coverage < 0.93 and abs(held_out - 0.95) < 0.02, (slab.coverage, held_out)


def test_delta_one_is_marginal_and_boxes_work() -> None:
    """delta = 1: the only slab holds every point; Box sets (vector targets) are per-example indicators."""
    g = torch.Generator().manual_seed(2)
    iv, y, x = _planted(200, g)
    slab = worst_slab_coverage(iv, y, x, delta=1.0, n_directions=5, generator=g)
    assert slab.coverage == pytest.approx(coverage(iv, y).item()) and slab.mass == 1.0
    assert isinstance(slab, Slab)
    box = Box(torch.zeros(200, 2, dtype=torch.float64), torch.ones(200, 2, dtype=torch.float64))
    yb = torch.rand(200, 2, generator=g, dtype=torch.float64) * 1.1
    full = worst_slab_coverage(box, yb, x, delta=1.0, n_directions=1, generator=g)
    assert full.coverage == pytest.approx(coverage(box, yb).item())


def test_errors() -> None:
    """Bad delta, shapes and directions raise ValueError."""
    iv, y, x = _planted(50, torch.Generator().manual_seed(3))
    for kwargs, match in [
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.5}, "delta"),
        ({"n_directions": 0}, "n_directions"),
        ({"directions": torch.zeros(2, 3)}, "non-zero"),
        ({"directions": torch.ones(2, 4)}, "shape"),
    ]:
        with pytest.raises(ValueError, match=match):
            worst_slab_coverage(iv, y, x, **kwargs)
    with pytest.raises(ValueError, match="x must"):
        worst_slab_coverage(iv, y, x[:10])
    slab = worst_slab_coverage(iv, y, x, directions=torch.eye(3))
    with pytest.raises(ValueError, match="inside"):
        slab.coverage_on(iv, y, x + 1e6)
