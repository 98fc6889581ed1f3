r"""Small calibration sets with reference scores: RSA-CP, implemented as its published fallback SPI.

**Label: published fallback.** RSA-CP, random score alignment (ICML 2026), aligns ``m`` real calibration
scores with ``N`` reference scores (a simulator, a cheaper model, a parametric law) by 1-D optimal transport;
the rank window of a real score of rank ``k`` among ``m + 1`` follows a Beta-binomial(``N``, ``k``, ``m+2-k``).
Its exact threshold rule is not published, so this module implements the closest published method: **SPI**,
synthetic-powered predictive inference (Bashari, Lotan, Lee, Dobriban, Romano 2025, arXiv:2505.13432), with the
same rank windows.

With ``M = m + 1`` real scores (calibration plus test), the reference rank ``j ∈ {1..N+1}`` (``j - 1``
reference scores below) of the real score of rank ``i`` has, for exchangeable real and reference scores,

.. math::  P(j \mid i) = \binom{j+i-2}{i-1}\binom{N+M-j-i+1}{M-i} \Big/ \binom{N+M}{M},

the Beta-binomial(``N``, ``i``, ``M+1-i``) law. Window ``[lo_i, hi_i]``: drop ``β/2`` of mass from each tail
(mass ``>= 1-β``). With ``K = ⌈(N+1)(1-α)⌉``:

* ``r+ = max{i : hi_i <= K}``, ``r- = max{i : lo_i <= K}`` (the real ranks whose windows bracket ``K``);
* ``q_ref = R_(K+1)``, the reference quantile at level ``(1-α)(1+1/N) + 1/N`` (``+inf`` if ``K + 1 > N``);
* ``q = clip(q_ref, S_(r+), S_(r-))`` with real order statistics ``S_(i)``, ``S_(m+1) = +inf``.

Guarantee, for *any* reference scores (no assumption on how they relate to the real ones): the test score's
rank among the ``m + 1`` real scores is uniform, and ``S_(r+) <= q <= S_(r-)``, so

.. math::  \frac{r_+}{m+1} \le P(Y \in C(X)) \le \frac{r_-}{m+1}

(the upper bound for continuous scores); see :meth:`SPIConformal.coverage_bounds`. When the reference matches
the real score law, ``q ≈ q_ref`` is nearly a large-sample quantile: coverage near ``1 - α`` with much less
spread than split conformal on ``m`` scores. Windows run over ``j ∈ 1..N+1`` (the reference code drops
``j = N+1``); this changes ``r±`` only in edge cases and never the guarantee, which holds for any ``r+ <= r-``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import torch
from torch import Tensor, nn

from .._checks import check_calibrator_dict, check_scores, finite_real, float_list, prepare_state_load
from ..quantile import check_alpha, conformal_rank
from ..scores import get_score
from ..sets import PredictionSet
from ..split import CALIBRATORS

__all__ = ["SPIConformal", "rank_pmf", "rank_windows"]


def rank_pmf(m: int, n_ref: int, i: int) -> Tensor:
    """``P(j | i)`` for ``j = 1..N+1`` (formula above), float64 ``(N+1,)``; ``i`` is the rank among ``m + 1``."""
    big_m = m + 1
    if not 1 <= i <= big_m or n_ref < 1:
        raise ValueError(f"need 1 <= i <= m+1 = {big_m} and n_ref >= 1, got i={i}, n_ref={n_ref}")
    j = torch.arange(1, n_ref + 2, dtype=torch.float64)
    lg = torch.lgamma
    log_c1 = lg(j + i - 1) - lg(j) - math.lgamma(i)  # C(j+i-2, i-1)
    log_c2 = lg(n_ref + big_m - j - i + 2) - lg(n_ref + 2 - j) - math.lgamma(big_m - i + 1)  # C(N+M-j-i+1, M-i)
    log_c3 = math.lgamma(n_ref + big_m + 1) - math.lgamma(big_m + 1) - math.lgamma(n_ref + 1)  # C(N+M, M)
    return (log_c1 + log_c2 - log_c3).exp()


@lru_cache(maxsize=64)
def _windows(m: int, n_ref: int, beta: float) -> tuple[tuple[int, ...], tuple[int, ...]]:
    lo, hi = [], []
    for i in range(1, m + 2):
        cdf = rank_pmf(m, n_ref, i).cumsum(0)
        lo.append(1 + int((cdf <= beta / 2).sum()))
        hi.append(min(1 + int((cdf < 1 - beta / 2).sum()), n_ref + 1))
    return tuple(lo), tuple(hi)


def rank_windows(m: int, n_ref: int, beta: float) -> tuple[Tensor, Tensor]:
    """Windows ``[lo_i, hi_i]`` (1-based reference ranks) for ``i = 1..m+1``, int64 ``(m+1,)`` each.

    ``lo_i`` is the smallest ``j`` with ``CDF(j | i) > β/2``, ``hi_i`` the smallest with ``CDF >= 1 - β/2``.
    """
    lo, hi = _windows(int(m), int(n_ref), float(beta))
    return torch.tensor(lo), torch.tensor(hi)


class SPIConformal(nn.Module):
    """RSA-CP fallback: SPI (Bashari et al. 2025) conformal calibration with ``N`` reference scores.

    Buffers: ``scores`` ``(m,)`` real calibration scores and ``reference`` ``(N,)`` reference scores, both
    sorted ascending. The threshold rule and its distribution-free coverage bracket are in the module docstring.

    Parameters
    ----------
    score : str
        Name in :data:`sciml.uq.scores.SCORES` used by :meth:`predict_set`.
    alpha : float
        Default miscoverage in ``(0, 1)``.
    beta : float
        Window tail mass in ``(0, 1)``: smaller widens the windows, loosening the bracket but letting the
        reference quantile through more often.

    """

    method = "spi"

    def __init__(self, score: str = "absolute", alpha: float = 0.1, beta: float = 0.1) -> None:
        super().__init__()
        self.score_fn = get_score(score)
        self.score_name = score
        self.alpha = check_alpha(alpha)
        self.beta = finite_real(beta, "beta")
        if not 0 < self.beta < 1:
            raise ValueError(f"'beta' must be in (0, 1), got {beta!r}")
        self.register_buffer("scores", torch.empty(0))
        self.register_buffer("reference", torch.empty(0))

    def fit(self, scores: Tensor, reference: Tensor) -> SPIConformal:
        """Store real calibration ``scores`` ``(m,)`` and ``reference`` scores ``(N,)``, finite, float."""
        check_scores(scores)
        try:
            check_scores(reference)
        except ValueError as err:
            raise ValueError(f"reference: {err}") from None
        self.scores = scores.detach().sort().values.to(self.scores.device)
        self.reference = reference.detach().sort().values.to(self.scores)
        return self

    def fit_predictions(self, pred: Tensor, y: Tensor, reference: Tensor, sigma: Tensor | None = None) -> SPIConformal:
        """Score real calibration predictions ``pred``, targets ``y`` (and ``sigma``), then :meth:`fit`."""
        return self.fit(self.score_fn.score(pred, y, sigma), reference)

    def ranks(self, alpha: float | None = None) -> tuple[int, int]:
        """``(r+, r-)``: the real ranks clipping the threshold, ``0 <= r+ <= r- <= m + 1``."""
        m, n_ref = self.scores.numel(), self.reference.numel()
        if m == 0 or n_ref == 0:
            raise RuntimeError("SPIConformal is not fitted; call fit(scores, reference) first")
        k = conformal_rank(n_ref, self.alpha if alpha is None else alpha)
        lo, hi = rank_windows(m, n_ref, self.beta)
        idx = torch.arange(1, m + 2)
        r_plus, r_minus = idx[hi <= k], idx[lo <= k]
        return (int(r_plus.max()) if r_plus.numel() else 0), (int(r_minus.max()) if r_minus.numel() else 0)

    def coverage_bounds(self, alpha: float | None = None) -> tuple[float, float]:
        """Distribution-free ``(r+/(m+1), r-/(m+1))``: coverage lies in between whatever the reference."""
        r_plus, r_minus = self.ranks(alpha)
        return r_plus / (self.scores.numel() + 1), r_minus / (self.scores.numel() + 1)

    def _order_stat(self, i: int) -> float:
        return -math.inf if i == 0 else math.inf if i > self.scores.numel() else float(self.scores[i - 1])

    def threshold(self, alpha: float | None = None) -> Tensor:
        """``q = clip(R_(K+1), S_(r+), S_(r-))`` (0-dim, dtype of the scores)."""
        r_plus, r_minus = self.ranks(alpha)
        k = conformal_rank(self.reference.numel(), self.alpha if alpha is None else alpha)
        q_ref = float(self.reference[k]) if k < self.reference.numel() else math.inf
        q = min(max(q_ref, self._order_stat(r_plus)), self._order_stat(r_minus))
        return torch.tensor(q, dtype=self.scores.dtype, device=self.scores.device)

    def predict_set(self, pred: Tensor, sigma: Tensor | None = None, alpha: float | None = None) -> PredictionSet:
        """Set ``{y : s(pred, y, sigma) <= q}`` of the named score."""
        return self.score_fn.predict_set(pred, self.threshold(alpha), sigma)

    def forward(self, pred: Tensor, sigma: Tensor | None = None, alpha: float | None = None) -> PredictionSet:
        """Alias of :meth:`predict_set`."""
        return self.predict_set(pred, sigma, alpha)

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        ref = state_dict.get(prefix + "reference")
        if isinstance(ref, Tensor) and (ref.dim() != 1 or not torch.isfinite(ref).all()):
            args[-1].append(f"{prefix}reference must be a 1-D tensor of finite scores")  # args[-1]: error_msgs
            return
        if prepare_state_load(self, state_dict, prefix, ("scores", "reference"), args[-1]):
            super()._load_from_state_dict(state_dict, prefix, *args)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable ``{"method", "score", "alpha", "beta", "scores", "reference"}``."""
        self.ranks()  # raises if unfitted
        return {
            "method": self.method,
            "score": self.score_name,
            "alpha": self.alpha,
            "beta": self.beta,
            "scores": [float(s) for s in self.scores.tolist()],
            "reference": [float(s) for s in self.reference.tolist()],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SPIConformal:
        """Rebuild from :meth:`to_dict` output (float64); ``ValueError`` on any malformed field."""
        check_calibrator_dict(d, {"method", "score", "alpha", "beta", "scores", "reference"}, cls.method)
        scores, ref = (torch.tensor(float_list(d[k], k), dtype=torch.float64) for k in ("scores", "reference"))
        return cls(score=d["score"], alpha=d["alpha"], beta=d["beta"]).fit(scores, ref)


CALIBRATORS[SPIConformal.method] = SPIConformal
