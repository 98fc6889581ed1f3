r"""COP, conformal optimistic prediction (ICLR 2026): quantile tracking with an optimistic ECDF hint.

Update, with a window of the last ``w`` scores:

.. math::

    η_t &= η\,(\max - \min \text{ of the window}), \qquad
    \hat q_{t+1} = \hat q_t + η_t(\mathrm{err}_t - α), \qquad \mathrm{err}_t = 1[s_t > q_t], \\
    q_{t+1} &= \hat q_{t+1} - λ_{t+1}\big(\hat F_{t+1}(\hat q_{t+1}) - (1-α)\big), \qquad λ_{t+1} = r\,η_{t+1},

with ``F̂`` the window ECDF and the hint switched off (``λ = 0``) until the window holds ``w`` scores. Before
two distinct scores are seen ``η_t = η · scale0``. The interval is ``[ŷ - q_t, ŷ + q_t]`` for the absolute
score (or two trackers at ``α/2`` on signed residuals).

**Long-run coverage** (derived here for time-varying steps; the paper's ``(B + (2+6M)η)/(Tη)`` is the
constant-step form). Let scores lie in ``[0, B]``, ``η_t <= η̄`` and ``q̂_1 ∈ [0, B]``. The hint is at most
``r η̄ max(α, 1-α) <= r η̄`` in size, so ``q̂_t > B + r η̄`` forces ``err_t = 0`` and ``q̂_t < -r η̄`` forces
``err_t = 1``; hence ``D_t = q̂_{t+1} - q̂_1`` obeys ``|D_t| <= M = B + 2(1+r)η̄``. Abel summation of
``err_t - α = (D_t - D_{t-1})/η_t`` gives, for every ``T`` and any sequence,

.. math::  \Big|\frac1T\sum_{t\le T}(\mathrm{err}_t - α)\Big| \le
           \frac{M}{T}\Big(\frac{1}{η_T} + \sum_{t<T}\Big|\frac{1}{η_t} - \frac{1}{η_{t+1}}\Big|\Big),

which is ``(B + 2(1+r)η)/(ηT)`` for a constant step (:func:`cop_bound` evaluates it on a step path).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from .._checks import check_calibrator_dict, finite_real, float_list, is_int, positive_real, prepare_state_load
from ..split import CALIBRATORS
from .online import QuantileTracker, step_score

__all__ = ["COP", "cop_bound"]


def cop_bound(steps: Tensor, b: float, ratio: float = 0.5) -> float:
    """Bound on ``|mean err - α|`` after ``T = len(steps)`` steps with step path ``η_1..η_T`` (module docstring).

    Parameters
    ----------
    steps : torch.Tensor
        The steps ``η_t > 0`` actually used, shape ``(T,)`` (from :meth:`COP.step_size` before each update).
    b : float
        Score bound ``B`` (all scores in ``[0, B]``, ``q̂_1 ∈ [0, B]``).
    ratio : float
        Hint ratio ``r = λ/η``.

    """
    steps = steps.double()
    inv = 1 / steps
    m = b + 2 * (1 + ratio) * float(steps.max())
    return m * (float(inv[-1]) + float((inv[1:] - inv[:-1]).abs().sum())) / steps.numel()


class COP(QuantileTracker):
    """Conformal optimistic prediction; buffers ``q`` (``q̂_t``), ``hint``, ``recent`` ``(≤ w,)``, all float64.

    Parameters
    ----------
    score, alpha
        As in :class:`~sciml.uq.catalogue.online.QuantileTracker`.
    lr : float
        ``η > 0``, unitless (the step is ``η`` times the window's score range); paper grid ``{1, .5, .1, .05}``.
    q0 : float
        Initial ``q̂_1``.
    window : int
        ``w``, scores kept for the range and the ECDF (paper: 100).
    ratio : float
        ``r = λ/η >= 0`` (paper: 0.5; 0 gives scale-adaptive quantile tracking without the hint).
    scale0 : float
        Score scale used for the step before the window has a non-zero range.

    """

    method = "cop"

    def __init__(self, score: str = "absolute", alpha: float = 0.1, lr: float = 0.1, q0: float = 0.0,
                 window: int = 100, ratio: float = 0.5, scale0: float = 1.0) -> None:
        super().__init__(score, alpha, lr, q0)
        if not is_int(window) or window < 2:
            raise ValueError(f"'window' must be an integer >= 2, got {window!r}")
        self.window, self.scale0 = int(window), positive_real(scale0, "scale0")
        self.ratio = finite_real(ratio, "ratio")
        if self.ratio < 0:
            raise ValueError(f"'ratio' must be >= 0, got {ratio!r}")
        self.register_buffer("hint", torch.tensor(0.0, dtype=torch.float64))
        self.register_buffer("recent", torch.empty(0, dtype=torch.float64))

    def step_size(self) -> float:
        """``η_t = η (max - min)`` of the window; ``η · scale0`` while that range is 0."""
        spread = float(self.recent.max() - self.recent.min()) if self.recent.numel() > 1 else 0.0
        return self.lr * (spread if spread > 0 else self.scale0)

    def threshold(self) -> Tensor:
        """``q_t = q̂_t - hint_t`` (0-dim float64)."""
        return self.q - self.hint

    def update(self, score: float | Tensor) -> COP:
        """Reveal ``s_t``: ``q̂ += η_t(err_t - α)``, push ``s_t`` into the window, recompute the hint."""
        s = step_score(score)
        err = float(s > float(self.threshold()))
        self.q.add_(self.step_size() * (err - self.alpha))
        new = torch.tensor([s], dtype=torch.float64, device=self.recent.device)
        self.recent = torch.cat([self.recent, new])[-self.window:]
        if self.recent.numel() == self.window and self.ratio > 0:
            ecdf = float((self.recent <= self.q).double().mean())
            self.hint.fill_(self.ratio * self.step_size() * (ecdf - (1 - self.alpha)))
        else:
            self.hint.zero_()
        return self

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        if prepare_state_load(self, state_dict, prefix, ("recent",), args[-1], checked="recent"):  # error_msgs
            super()._load_from_state_dict(state_dict, prefix, *args)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable configuration and state."""
        return super().to_dict() | {"window": self.window, "ratio": self.ratio, "scale0": self.scale0,
                                    "hint": float(self.hint), "recent": [float(s) for s in self.recent.tolist()]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> COP:
        """Rebuild from :meth:`to_dict` output; ``ValueError`` on any malformed field."""
        keys = {"method", "score", "alpha", "lr", "q", "window", "ratio", "scale0", "hint", "recent"}
        check_calibrator_dict(d, keys, cls.method)
        new = cls(d["score"], d["alpha"], d["lr"], d["q"], d["window"], d["ratio"], d["scale0"])
        recent = float_list(d["recent"], "recent")
        if len(recent) > new.window:
            raise ValueError(f"'recent' holds {len(recent)} scores, more than window={new.window}")
        new.recent = torch.tensor(recent, dtype=torch.float64)
        new.hint.fill_(finite_real(d["hint"], "hint"))
        return new


CALIBRATORS[COP.method] = COP
