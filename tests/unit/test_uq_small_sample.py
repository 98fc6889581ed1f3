"""RSA-CP fallback (SPI): rank windows, the distribution-free coverage bracket, gains over split CP at m = 20, 40."""

from __future__ import annotations

import json
import math
from math import comb

import pytest
import torch

from sciml.uq import CALIBRATORS, SPIConformal, calibrator_from_dict, conformal_quantile, rank_pmf, rank_windows

torch.set_num_threads(1)
ALPHA, BETA, TRIALS = 0.1, 0.1, 2000


def _coverage_given_q(q: float) -> float:
    """Exact coverage P(|Z| <= q), Z ~ N(0, 1): the test scores below are |N(0, 1)|."""
    return 1.0 if q == math.inf else math.erf(q / math.sqrt(2))


def _trials(m: int, n_ref: int, ref_scale: float, seed: int) -> tuple[torch.Tensor, torch.Tensor, SPIConformal]:
    """Coverage given the calibration data, and the threshold, for SPI and split CP over seeded trials."""
    g = torch.Generator().manual_seed(seed)
    cov, q_spi, q_split = [], [], []
    cal = SPIConformal("absolute", ALPHA, BETA)
    for _ in range(TRIALS):
        real = torch.randn(m, generator=g, dtype=torch.float64).abs()
        ref = ref_scale * torch.randn(n_ref, generator=g, dtype=torch.float64).abs()
        q = cal.fit(real, ref).threshold().item()
        q_spi.append(q)
        q_split.append(conformal_quantile(real, ALPHA).item())
        cov.append([_coverage_given_q(q), _coverage_given_q(q_split[-1])])
    return torch.tensor(cov, dtype=torch.float64), torch.tensor([q_spi, q_split], dtype=torch.float64), cal


def test_window_law_is_spis_beta_binomial() -> None:
    """P(j | i) equals SPI's binomial formula with m+1 real scores, i.e. Beta-binomial(N, i, m+2-i)."""
    m, n_ref = 6, 9
    for i in range(1, m + 2):
        # C(j+i-2, i-1) C(N+M-j-i+1, M-i) / C(N+M, M) with M = m + 1 real scores (calibration + test).
        law = [comb(j + i - 2, i - 1) * comb(n_ref + m + 2 - j - i, m + 1 - i) for j in range(1, n_ref + 2)]
        law_t = torch.tensor(law, dtype=torch.float64) / comb(n_ref + m + 1, m + 1)
        a, b = i, m + 2 - i  # Beta-binomial(N, a, b) at x = j - 1
        x = torch.arange(n_ref + 1, dtype=torch.float64)
        lg = torch.lgamma
        log_bb = (
            lg(torch.tensor(n_ref + 1.0)) - lg(x + 1) - lg(n_ref - x + 1)
            + lg(x + a) + lg(n_ref - x + b) - lg(torch.tensor(n_ref + a + b + 0.0))
            - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
        )  # fmt: skip
        torch.testing.assert_close(rank_pmf(m, n_ref, i), law_t)
        torch.testing.assert_close(rank_pmf(m, n_ref, i), log_bb.exp())
    lo, hi = rank_windows(40, 500, BETA)
    assert (lo[1:] >= lo[:-1]).all() and (hi[1:] >= hi[:-1]).all() and (lo <= hi).all()
    for i in (1, 20, 41):
        cdf = torch.cat([torch.zeros(1, dtype=torch.float64), rank_pmf(40, 500, i).cumsum(0)])
        assert cdf[hi[i - 1]] - cdf[lo[i - 1] - 1] >= 1 - BETA  # window mass
    with pytest.raises(ValueError, match="m\\+1"):
        rank_pmf(5, 10, 7)


@pytest.mark.parametrize("m", [20, 40])
def test_matched_reference_valid_tighter_and_steadier_than_split(m: int) -> None:
    """Reference = real law: coverage >= 1-α (3 SE), inside the bracket; narrower and steadier than split CP."""
    cov, q, cal = _trials(m, 1000, 1.0, seed=m)
    lower, upper = cal.coverage_bounds()
    mean, se = cov[:, 0].mean().item(), cov[:, 0].std().item() / math.sqrt(TRIALS)
    assert mean >= 1 - ALPHA - 3 * se and lower - 3 * se <= mean <= upper + 3 * se, (mean, se)
    # ≈ (K+1)/(N+1) = 902/1001, the reference rank used; clipping rarely binds.
    assert abs(mean - 902 / 1001) <= 0.005
    assert q[0].mean() < q[1].mean() - 0.03  # here 1.66 vs 1.76 (m=20), 1.66 vs 1.70 (m=40)
    assert cov[:, 0].std() < 0.35 * cov[:, 1].std()  # here ~0.011 vs 0.064 (m=20), 0.046 (m=40)


@pytest.mark.parametrize("m", [20, 40])
@pytest.mark.parametrize("side", ["too_small", "too_large"])
def test_bad_reference_is_clipped_to_the_guaranteed_bracket(m: int, side: str) -> None:
    """A useless reference gives q = S_(r+) or S_(r-): mean coverage r±/(m+1) exactly (Beta mean, 3 SE)."""
    cov, _, cal = _trials(m, 500, 1e-3 if side == "too_small" else 1e3, seed=7 * m + len(side))
    r_plus, r_minus = cal.ranks()
    assert (r_plus, r_minus) == {20: (16, 21), 40: (33, 40)}[m]
    r = r_plus if side == "too_small" else r_minus
    if r > m:  # S_(m+1) = +inf: the full line, coverage 1
        assert (cov[:, 0] == 1).all()
        return
    p = r / (m + 1)
    se = math.sqrt(r * (m + 1 - r) / ((m + 1) ** 2 * (m + 2)) / TRIALS)  # Var Beta(r, m+1-r) / trials
    assert abs(cov[:, 0].mean().item() - p) <= 3 * se, (cov[:, 0].mean().item(), p, se)
    assert cal.coverage_bounds() == (r_plus / (m + 1), r_minus / (m + 1))


def test_threshold_by_hand_and_sets() -> None:
    """q = clip(R_(K+1), S_(r+), S_(r-)); predict_set inverts the named score; alpha per call."""
    real = torch.arange(1.0, 21.0, dtype=torch.float64)  # S_(i) = i, m = 20: r+ = 16, r- = 21
    ref = torch.linspace(0.0, 30.0, 1000, dtype=torch.float64)
    cal = SPIConformal(alpha=ALPHA).fit(real.flip(0), ref)
    assert cal.ranks() == (16, 21)
    k = math.ceil(1001 * 0.9)  # K = 901: q_ref = R_(902) = 27.06, inside [S_(16), S_(21)] = [16, inf]
    assert cal.threshold().item() == ref[k].item()
    assert cal.fit(real, ref / 10).threshold().item() == 16.0  # q_ref = 2.7 < S_(r+): clipped up to 16
    iv = cal.predict_set(torch.tensor([0.0, 1.0], dtype=torch.float64))
    assert iv.lower.tolist() == [-16.0, -15.0] and iv.upper.tolist() == [16.0, 17.0]
    assert cal.threshold(alpha=0.5).item() <= cal.threshold().item()
    with pytest.raises(RuntimeError, match="fit"):
        SPIConformal().threshold()
    with pytest.raises(ValueError, match="reference"):
        SPIConformal().fit(real, torch.tensor([math.nan]))
    with pytest.raises(ValueError, match="beta"):
        SPIConformal(beta=1.0)


def test_round_trips() -> None:
    """to_dict -> JSON -> from_dict and state_dict (any sizes) reproduce the threshold; registered as 'spi'."""
    g = torch.Generator().manual_seed(0)
    cal = SPIConformal("normalized", 0.2, 0.05).fit(torch.rand(25, generator=g), torch.rand(300, generator=g))
    d = json.loads(json.dumps(cal.to_dict()))
    fresh = SPIConformal("normalized", 0.2, 0.05).fit(torch.rand(3), torch.rand(7))
    fresh.load_state_dict(cal.state_dict())
    for new in (SPIConformal.from_dict(d), calibrator_from_dict(d), fresh):
        assert new.threshold().item() == pytest.approx(cal.threshold().item(), abs=0, rel=1e-7)
        assert new.coverage_bounds() == cal.coverage_bounds()
    assert CALIBRATORS["spi"] is SPIConformal
    for patch, match in [({"beta": 0.0}, "beta"), ({"reference": []}, "empty"), ({"extra": 1}, "unexpected")]:
        with pytest.raises(ValueError, match=match):
            calibrator_from_dict(d | patch)
    with pytest.raises(RuntimeError, match="reference"):
        SPIConformal().load_state_dict({"scores": torch.ones(2), "reference": torch.tensor([math.inf])})
