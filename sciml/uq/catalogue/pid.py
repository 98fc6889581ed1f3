r"""Conformal PID control: quantile tracking plus a saturating error integrator plus a scorecaster.

Angelopoulos, Candès, Tibshirani (2023), "Conformal PID control for time series prediction", NeurIPS.
The threshold for step ``t+1`` adds three terms:

.. math::

    q_{t+1} = \underbrace{\hat q_{t+1}}_{P} + \underbrace{r_t(E_t)}_{I} + \underbrace{\hat s_{t+1}}_{D},
    \qquad \hat q_{t+1} = \hat q_t + \eta_t(\mathrm{err}_t - \alpha), \qquad
    E_t = \sum_{i \le t} (\mathrm{err}_i - \alpha),

with the saturating integrator ``r_t(x) = K_I tan(x log(t+1) / (C_sat (t+1)))``, set to ``±inf`` once the
argument reaches ``±π/2``, and an optional scorecaster forecast ``ŝ_{t+1}`` of the next score (the paper's
"D" term). ``η_t = η`` or, with ``window``, ``η · (max - min)`` of the last ``window`` scores (the paper's
experiments). The P part alone is :class:`~sciml.uq.catalogue.online.QuantileTracker`.

Long-run coverage for *any* score sequence (unbounded, heavy-tailed, any finite scorecast), ``K_I > 0``:
with ``h(t) = (π/2) C_sat (t+1)/log(t+1)``, ``E_t >= h(t)`` forces ``q_{t+1} = +inf`` (``err = 0``) and
``E_t <= -h(t)`` forces ``q_{t+1} = -inf`` (``err = 1``), so by induction
``-(H_T + α) <= E_T <= H_T + 1 - α`` with ``H_T = max_{1 <= t < T} h(t)`` (``H_1 = 0``), i.e.

.. math::  \Big|\frac1T\sum_{t\le T}\mathrm{err}_t - \alpha\Big| \le \frac{H_T + \max(\alpha, 1-\alpha)}{T}
           = O\!\Big(\frac{C_{sat}}{\log T}\Big).

This is the paper's saturation argument with constants worked out for this ``r_t``; the reference code
integrates ``E_{t-1}`` (one step of lag), here ``E_t`` includes the latest step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from .._checks import check_calibrator_dict, finite_real, float_list, is_int, positive_real, prepare_state_load
from ..split import CALIBRATORS
from .online import QuantileTracker, step_score, step_value

__all__ = ["ConformalPID", "pid_bound"]

Scorecaster = Callable[[Tensor], float | Tensor]


def pid_bound(t: int, alpha: float, c_sat: float) -> float:
    """Bound ``(H_T + max(α, 1-α))/T`` on ``|mean err - α|`` after ``T = t >= 1`` steps (module docstring).

    ``h(s) = (π/2) C_sat (s+1)/log(s+1)`` decreases from ``s = 1`` to ``2`` and increases after (``s+1 > e``),
    so ``H_T = max(h(1), h(T-1))``.
    """
    h = [(math.pi / 2) * c_sat * (s + 1) / math.log(s + 1) for s in {1, t - 1} if 1 <= s < t]
    return (max(h, default=0.0) + max(alpha, 1 - alpha)) / t


class ConformalPID(QuantileTracker):
    """Conformal PID control: quantile tracking (P) + saturating error integrator (I) + scorecaster (D).

    Buffers (``state_dict``): ``q`` the P state ``q̂_t``, ``err_sum`` ``E_t``, ``steps`` ``t`` (int64),
    ``scorecast`` ``ŝ_{t+1}``, ``recent`` the last ``window`` scores (arrival order), all float64.

    Parameters
    ----------
    score, alpha, lr, q0
        As in :class:`~sciml.uq.catalogue.online.QuantileTracker` (``lr`` is ``η``, ``q0`` is ``q̂_1``).
    k_i : float
        Integrator gain ``K_I >= 0``, in score units (``0`` disables the I term and its guarantee).
    c_sat : float
        Saturation constant ``C_sat > 0``; smaller saturates sooner (tighter bound, more infinite sets).
    window : int or None
        Keep the last ``window`` scores: ``η_t = η (max - min)`` of them, and the scorecaster's input.
    scorecaster : callable or None
        ``f(recent) -> ŝ_{t+1}``, called after each update with the ``(≤ window,)`` float64 recent scores;
        must return a finite number. Code is not serialised: pass it again to :meth:`from_dict`.

    """

    method = "pid"

    def __init__(
        self,
        score: str = "absolute",
        alpha: float = 0.1,
        lr: float = 0.1,
        q0: float = 0.0,
        k_i: float = 1.0,
        c_sat: float = 1.0,
        window: int | None = None,
        scorecaster: Scorecaster | None = None,
    ) -> None:
        super().__init__(score, alpha, lr, q0)
        self.k_i = finite_real(k_i, "k_i")
        if self.k_i < 0:
            raise ValueError(f"'k_i' must be >= 0, got {k_i!r}")
        self.c_sat = positive_real(c_sat, "c_sat")
        if window is not None and (not is_int(window) or window < 1):
            raise ValueError(f"'window' must be None or a positive integer, got {window!r}")
        if scorecaster is not None and (not callable(scorecaster) or window is None):
            raise ValueError("'scorecaster' must be a callable, and needs a 'window' of recent scores")
        self.window, self.scorecaster = (None if window is None else int(window)), scorecaster
        for name in ("err_sum", "scorecast"):
            self.register_buffer(name, torch.tensor(0.0, dtype=torch.float64))
        self.register_buffer("steps", torch.tensor(0, dtype=torch.int64))
        self.register_buffer("recent", torch.empty(0, dtype=torch.float64))

    def integrator(self) -> float:
        """``r_t(E_t) = K_I tan(E_t log(t+1) / (C_sat (t+1)))``, ``±inf`` past ``±π/2``; 0 before any step."""
        t = int(self.steps)
        if t == 0 or self.k_i == 0:
            return 0.0
        x = float(self.err_sum) * math.log(t + 1) / (self.c_sat * (t + 1))
        if abs(x) >= math.pi / 2:
            return math.copysign(math.inf, x)
        return self.k_i * math.tan(x)

    def threshold(self) -> Tensor:
        """Return ``q_{t+1} = q̂ + r_t(E_t) + ŝ`` (0-dim float64); ``±inf`` when the integrator saturates."""
        return self.q + self.integrator() + self.scorecast

    def update(self, score: float | Tensor) -> ConformalPID:
        """Reveal ``s_t``: ``err_t = 1[s_t > q_t]``, then update ``q̂``, ``E``, ``t``, the window, ``ŝ``."""
        s = step_score(score)
        err = float(s > float(self.threshold()))
        lr = self.lr
        if self.window is not None and self.recent.numel():
            lr = self.lr * float(self.recent.max() - self.recent.min())
        self.q.add_(lr * (err - self.alpha))
        self.err_sum.add_(err - self.alpha)
        self.steps.add_(1)
        if self.window is not None:
            new = torch.tensor([s], dtype=torch.float64, device=self.recent.device)
            self.recent = torch.cat([self.recent, new])[-self.window :]
        if self.scorecaster is not None:
            forecast = step_value(self.scorecaster(self.recent.clone()), "scorecast")
            self.scorecast.fill_(finite_real(forecast, "scorecast"))
        return self

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        if prepare_state_load(self, state_dict, prefix, ("recent",), args[-1], checked="recent"):  # error_msgs
            super()._load_from_state_dict(state_dict, prefix, *args)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable configuration and state; ``"scorecaster"`` records only whether one was set."""
        return super().to_dict() | {
            "k_i": self.k_i,
            "c_sat": self.c_sat,
            "window": self.window,
            "scorecaster": self.scorecaster is not None,
            "err_sum": float(self.err_sum),
            "steps": int(self.steps),
            "scorecast": float(self.scorecast),
            "recent": [float(s) for s in self.recent.tolist()],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], scorecaster: Scorecaster | None = None) -> ConformalPID:
        """Rebuild from :meth:`to_dict` output, with the same ``scorecaster`` callable if one was used."""
        keys = {"method", "score", "alpha", "lr", "q", "k_i", "c_sat", "window", "scorecaster", "err_sum"}
        check_calibrator_dict(d, keys | {"steps", "scorecast", "recent"}, cls.method)
        if d["scorecaster"] is not (scorecaster is not None):
            raise ValueError(
                f"'scorecaster' is {d['scorecaster']!r} in the dict; pass the scorecaster callable to from_dict "
                "exactly when the calibrator was saved with one (code is not serialised)"
            )
        if not is_int(d["steps"]) or d["steps"] < 0:
            raise ValueError(f"'steps' must be a non-negative integer, got {d['steps']!r}")
        new = cls(d["score"], d["alpha"], d["lr"], d["q"], d["k_i"], d["c_sat"], d["window"], scorecaster)
        recent = float_list(d["recent"], "recent")
        if len(recent) > (new.window or 0):
            raise ValueError(f"'recent' holds {len(recent)} scores, more than window={new.window}")
        new.err_sum.fill_(finite_real(d["err_sum"], "err_sum"))
        new.scorecast.fill_(finite_real(d["scorecast"], "scorecast"))
        new.steps.fill_(int(d["steps"]))
        new.recent = torch.tensor(recent, dtype=torch.float64)
        return new


CALIBRATORS[ConformalPID.method] = ConformalPID
