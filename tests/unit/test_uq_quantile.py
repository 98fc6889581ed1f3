"""Finite-sample conformal rank and quantile: exact ranks, +inf for small n, closed-form coverage."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from sciml.uq import conformal_quantile, conformal_rank

ALPHAS = ["0.01", "0.05", "0.1", "0.2", "0.25", "0.3", "0.5", "0.7", "0.9"]
NS = [0, 1, 2, 5, 8, 9, 10, 15, 19, 30, 99, 100, 1000]


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("n", NS)
def test_rank_matches_exact_fraction(n: int, alpha: str) -> None:
    """Rank equals ceil((n+1)(1-alpha)) computed in exact fractions."""
    expected = math.ceil((n + 1) * (1 - Fraction(alpha)))
    assert conformal_rank(n, float(alpha)) == expected


def test_rank_is_robust_to_float_error() -> None:
    """Ranks where naive float arithmetic lands just above an integer."""
    assert conformal_rank(9, 0.1) == 9  # 10 * 0.9 = 9 exactly, not 9.000...01
    assert conformal_rank(9, 0.7) == 3  # 10 * (1 - 0.7) = 3.0000000000000004 in floats
    assert conformal_rank(99, 0.7) == 30
    assert conformal_rank(19, 0.05) == 19
    assert conformal_rank(8, 0.1) == 9  # > n: infinite threshold


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, 1.5, float("nan"), True, "0.1", None])
def test_bad_alpha_raises(alpha: object) -> None:
    """Alpha outside (0, 1), NaN, bool or non-number raises ValueError."""
    with pytest.raises(ValueError, match="alpha"):
        conformal_rank(10, alpha)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="alpha"):
        conformal_quantile(torch.rand(10), alpha)  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [-1, 2.0, True])
def test_bad_n_raises(n: object) -> None:
    """Negative or non-integer n raises ValueError."""
    with pytest.raises(ValueError, match="n must be"):
        conformal_rank(n, 0.1)  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [0, 1, 5, 8])
def test_small_calibration_set_gives_inf(n: int) -> None:
    """Too small a set (n < 1/alpha - 1) gives a +inf threshold (full set), never a finite one."""
    q = conformal_quantile(torch.rand(n, dtype=torch.float64), 0.1)
    assert q.dim() == 0 and q.dtype == torch.float64
    assert math.isinf(q.item()) and q.item() > 0


def test_n9_alpha01_gives_the_max() -> None:
    """n=9, alpha=0.1: k=10*0.9=9, the largest score."""
    scores = torch.rand(9, generator=torch.Generator().manual_seed(1))
    assert conformal_quantile(scores, 0.1).item() == scores.max().item()


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("n", [1, 9, 15, 30, 100])
def test_quantile_is_kth_smallest(n: int, alpha: str) -> None:
    """The quantile is the k-th smallest of shuffled scores, +inf when k > n."""
    g = torch.Generator().manual_seed(n)
    sorted_scores = torch.rand(n, generator=g, dtype=torch.float64).sort().values
    shuffled = sorted_scores[torch.randperm(n, generator=g)]
    k = math.ceil((n + 1) * (1 - Fraction(alpha)))
    expected = sorted_scores[k - 1].item() if k <= n else math.inf
    assert conformal_quantile(shuffled, float(alpha)).item() == expected


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_quantile_keeps_dtype(dtype: torch.dtype) -> None:
    """Every float dtype gives the same rank and keeps its dtype."""
    scores = torch.arange(1, 21, dtype=dtype)  # n=20, alpha=0.1 -> k = ceil(18.9) = 19
    q = conformal_quantile(scores, 0.1)
    assert q.dtype == dtype and q.item() == 19.0
    assert conformal_quantile(scores[:5], 0.1).dtype == dtype


def test_quantile_batched_over_leading_dims() -> None:
    """Leading dimensions are independent calibration sets."""
    scores = torch.rand(4, 3, 30, generator=torch.Generator().manual_seed(2))
    q = conformal_quantile(scores, 0.1)  # k = 28
    assert q.shape == (4, 3)
    assert torch.equal(q, scores.sort(dim=-1).values[..., 27])


def test_inf_scores_allowed_nan_rejected() -> None:
    """An inf score ranks like any other; a NaN score raises."""
    scores = torch.tensor([1.0, 2.0, math.inf, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
    assert conformal_quantile(scores, 0.1).item() == math.inf  # k = 9: the inf score itself
    assert conformal_quantile(scores, 0.5).item() == 5.0  # k = 5
    with pytest.raises(ValueError, match="NaN"):
        conformal_quantile(torch.tensor([1.0, float("nan"), 2.0]), 0.5)


@pytest.mark.parametrize("bad", [torch.tensor(1.0), torch.arange(10), [1.0, 2.0]])
def test_bad_scores_raise(bad: object) -> None:
    """0-dim, integer or non-tensor scores raise ValueError."""
    with pytest.raises(ValueError):
        conformal_quantile(bad, 0.1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("n", "expected"),
    [(9, Fraction(9, 10)), (15, Fraction(15, 16)), (30, Fraction(28, 31)), (100, Fraction(91, 101))],
)
def test_closed_form_expected_coverage(n: int, expected: Fraction) -> None:
    """Mean coverage k/(n+1) for alpha=0.1 within 3 SE over 20000 seeded trials."""
    # Exchangeable continuous scores: P(s_test <= q) = k/(n+1) exactly, so each trial is Bernoulli(p).
    # 20000 trials give 3 SE <= 0.0064 < 1/101, enough to catch an off-by-one rank at n=100.
    trials, alpha = 20_000, 0.1
    g = torch.Generator().manual_seed(1000 + n)
    s = torch.rand(trials, n + 1, generator=g, dtype=torch.float64)
    q = conformal_quantile(s[:, :n], alpha)  # (trials,)
    covered = (s[:, n] <= q).double().mean().item()
    p = float(expected)
    se = math.sqrt(p * (1 - p) / trials)
    assert abs(covered - p) <= 3 * se, (covered, p, se)
