r"""Scale-free online gradient descent (SF-OGD) on the quantile (pinball) loss of the threshold.

Orabona & Pál (2018), "Scale-free online learning", TCS; used for online conformal prediction by Bhatnagar,
Wang, Xiong, Bai (2023), "Improved online conformal prediction via strongly adaptive online learning", ICML.
With the pinball-loss gradient ``g_t = α - err_t`` (``err_t = 1[s_t > q_t]``) and
``G_t = Σ_{i<=t} g_i²``:

.. math::  q_{t+1} = q_t - \eta\, g_t / \sqrt{G_t} = q_t + \eta_t(\mathrm{err}_t - \alpha),
           \qquad \eta_t = \eta / \sqrt{G_t}.

Long-run coverage (derived here; the usual ``(B + η)/(ηT)`` is the constant-step bound of
:class:`~sciml.uq.catalogue.online.QuantileTracker`): for scores in ``[0, B]`` and ``q_1 ∈ [0, B]``, ``q_t`` stays in
``[-αη_1, B + (1-α)η_1]`` (``η_t`` is non-increasing), so ``D_t = q_{t+1} - q_1`` obeys ``|D_t| <= M = B + η_1``
with ``η_1 = η/|g_1|``. Abel summation of ``err_t - α = (D_t - D_{t-1})/η_t`` gives

.. math::  \Big|\sum_{t\le T}(\mathrm{err}_t - \alpha)\Big| \le M\Big(\frac{2}{\eta_T} - \frac{1}{\eta_1}\Big)
           = \frac{(B + \eta/|g_1|)(2\sqrt{G_T} - |g_1|)}{\eta}
           \le \frac{2 (B + \eta/\min(\alpha, 1-\alpha)) \max(\alpha, 1-\alpha)}{\eta} \sqrt{T},

so ``|mean err - α| = O(1/√T)``. The step adapts to the observed gradients; ``η`` carries the unit of the
scores (set it to about their range ``B``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from .._checks import check_calibrator_dict, finite_real
from ..split import CALIBRATORS
from .online import QuantileTracker, step_score

__all__ = ["SFOGD", "sf_ogd_bound"]


def sf_ogd_bound(t: int, alpha: float, lr: float, b: float, grad_sq: float, g1: float) -> float:
    """Bound on ``|mean err - α|`` after ``T = t`` steps: ``(B + η/|g_1|)(2√G_T - |g_1|)/(η T)`` (above)."""
    return (b + lr / abs(g1)) * (2 * math.sqrt(grad_sq) - abs(g1)) / (lr * t)


class SFOGD(QuantileTracker):
    """Scale-free OGD quantile tracking, ``q_{t+1} = q_t + η(err_t - α)/√(Σ_{i<=t} g_i²)``.

    Buffers: ``q`` (0-dim float64) and ``grad_sq`` ``G_t`` (0-dim float64). Parameters as in
    :class:`~sciml.uq.catalogue.online.QuantileTracker`; ``lr`` is ``η``, in score units (e.g. the score range ``B``).
    """

    method = "sf_ogd"

    def __init__(self, score: str = "absolute", alpha: float = 0.1, lr: float = 1.0, q0: float = 0.0) -> None:
        super().__init__(score, alpha, lr, q0)
        self.register_buffer("grad_sq", torch.tensor(0.0, dtype=torch.float64))

    def update(self, score: float | torch.Tensor) -> SFOGD:
        """Step with revealed ``s_t``: ``g_t = α - 1[s_t > q_t]``, ``G_t += g_t²``, ``q -= η g_t/√G_t``."""
        g = self.alpha - float(step_score(score) > float(self.q))
        self.grad_sq.add_(g * g)
        self.q.sub_(self.lr * g / math.sqrt(float(self.grad_sq)))
        return self

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable ``{"method", "score", "alpha", "lr", "q", "grad_sq"}``."""
        return super().to_dict() | {"grad_sq": float(self.grad_sq)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SFOGD:
        """Rebuild from :meth:`to_dict` output; ``ValueError`` on any malformed field."""
        check_calibrator_dict(d, {"method", "score", "alpha", "lr", "q", "grad_sq"}, cls.method)
        grad_sq = finite_real(d["grad_sq"], "grad_sq")
        if grad_sq < 0:
            raise ValueError(f"'grad_sq' must be >= 0, got {grad_sq!r}")
        new = cls(score=d["score"], alpha=d["alpha"], lr=d["lr"], q0=d["q"])
        new.grad_sq.fill_(grad_sq)
        return new


CALIBRATORS[SFOGD.method] = SFOGD
