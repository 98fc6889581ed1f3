r"""Conformal sets for zero-inflated targets (band gaps: 0 for metals), covering zeros and positives separately.

A hurdle model gives, per input, ``p₀`` (probability that ``y = 0``) and ``v >= 0`` (the value if ``y > 0``). The
point 0 and the positive values are separate outcomes, and the set (:class:`~sciml.uq.sets.ZeroOrInterval`) is

.. math::  C(x) = \{0 : p₀ \ge t\} \ \cup\ \big([\ell(x),\ v + q] \cap (0, \infty)\big), \qquad
           \ell(x) = 0\ \text{if}\ p₀ \ge t,\ \max(v - q, 0)\ \text{otherwise},

never below 0. Two thresholds, each calibrated on its own class (label-conditional conformal, Vovk 2012;
Sadinle, Lei & Wasserman 2019): ``t`` on the calibration zeros, the conformal quantile of their scores ``-p₀``,
so that 0 is in the set for a fraction ``>= 1 - α`` of them; then ``q`` on the calibration positives given ``t``
(score ``|y - v|``, or ``max(y - v, 0)`` where ``p₀ >= t``), so that ``y`` is in the set for a fraction
``>= 1 - α`` of them. Both are finite-sample guarantees: ``t`` uses the zeros alone, and ``q`` is the conformal
quantile of positives exchangeable given ``t``. A zero is covered only through ``p₀ >= t``, never because the
positive part reaches down to 0; a set that includes 0 for a small ``v`` would cover metals beyond ``1 - α``
wherever metals are common.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ._checks import check_calibrator_dict, float_list
from .quantile import check_alpha, conformal_quantile
from .sets import ZeroOrInterval
from .split import CALIBRATORS

__all__ = ["HurdleConformal", "hurdle_set"]


def _q_scores(p_zero: Tensor, value: Tensor, y: Tensor, t: Tensor) -> Tensor:
    """Smallest ``q`` putting each positive ``y`` in its set: ``|y - v|``, or ``max(y - v, 0)`` when ``p₀ >= t``."""
    return torch.where(p_zero >= t, (y - value).clamp_min(0.0), (y - value).abs())


def hurdle_set(p_zero: Tensor, value: Tensor, t: Tensor, q: Tensor) -> ZeroOrInterval:
    """The set of the module docstring for ``p₀``, ``v`` ``(m,)`` and thresholds ``t``, ``q`` (0-dim or ``(m,)``)."""
    value = value.to(torch.float64)
    zero = p_zero.to(torch.float64) >= t
    lower = torch.where(zero, torch.zeros_like(value), (value - q).clamp_min(0.0))
    return ZeroOrInterval(zero, lower, value + q)


class HurdleConformal(nn.Module):
    """Class-wise conformal sets for a zero-inflated target (module docstring).

    Buffers ``p_zero``, ``value``, ``y`` ``(n,)`` hold the calibration set; thresholds are recomputed for any
    ``alpha``. ``alpha`` is the default miscoverage.
    """

    method = "hurdle"

    def __init__(self, alpha: float = 0.1) -> None:
        super().__init__()
        self.alpha = check_alpha(alpha)
        for name in ("p_zero", "value", "y"):
            self.register_buffer(name, torch.empty(0, dtype=torch.float64))

    @property
    def n_calib(self) -> int:
        """Number of calibration points."""
        return self.y.numel()

    def fit(self, p_zero: Tensor, value: Tensor, y: Tensor) -> HurdleConformal:
        """Store calibration ``p₀``, ``v`` and targets ``y >= 0``, all ``(n,)``; returns ``self``."""
        p_zero, value, y = (torch.as_tensor(a, dtype=torch.float64).reshape(-1) for a in (p_zero, value, y))
        if not (len(p_zero) == len(value) == len(y)) or len(y) == 0:
            raise ValueError(f"p_zero, value and y must be non-empty and of one length, got {len(p_zero)}, "
                             f"{len(value)}, {len(y)}")
        if not torch.isfinite(torch.stack([p_zero, value, y])).all() or (y < 0).any():
            raise ValueError("calibration p_zero, value and y must be finite and y >= 0")
        self.p_zero, self.value, self.y = p_zero, value, y
        return self

    def thresholds(self, alpha: float | None = None) -> tuple[Tensor, Tensor]:
        """``(t, q)``: the ``p₀`` from which 0 is in the set, and the half-width around ``v`` (0-dim each)."""
        if self.n_calib == 0:
            raise RuntimeError("HurdleConformal is not fitted; call fit first")
        alpha = check_alpha(self.alpha if alpha is None else alpha)
        zero = self.y <= 0
        pos = ~zero
        t = -conformal_quantile(-self.p_zero[zero], alpha) if zero.any() else \
            torch.tensor(torch.inf, dtype=torch.float64)
        q = conformal_quantile(_q_scores(self.p_zero[pos], self.value[pos], self.y[pos], t), alpha) \
            if pos.any() else torch.tensor(0.0, dtype=torch.float64)
        return t, q

    def predict_set(self, p_zero: Tensor, value: Tensor, alpha: float | None = None, members: None = None
                    ) -> ZeroOrInterval:
        """Sets for ``m`` inputs with ``p₀`` and ``v`` ``(m,)``; bounds are never below 0.

        ``members`` is accepted for the interface of the grouped subclass and must be ``None`` here.
        """
        if members is not None:
            raise ValueError("HurdleConformal has no groups; members must be None")
        return hurdle_set(p_zero, value, *self.thresholds(alpha))

    def point(self, p_zero: Tensor, value: Tensor, alpha: float | None = None, members: None = None) -> Tensor:
        """Point prediction inside the set, ``(m,)``: 0 where ``p₀ >= 1/2`` and 0 is in the set, else ``v``.

        The mixture's median is 0 when ``p₀ >= 1/2``; where the calibrated set leaves 0 out (``1/2 <= p₀ < t``)
        the value ``v`` is reported instead, so that a row never shows a prediction outside its own set.
        """
        sets = self.predict_set(p_zero, value, alpha, members)
        zero = (p_zero.to(torch.float64) >= 0.5) & sets.zero
        return torch.where(zero, torch.zeros_like(sets.lower), value.to(torch.float64))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable ``{"method", "alpha", "p_zero", "value", "y"}``."""
        if self.n_calib == 0:
            raise RuntimeError("HurdleConformal is not fitted; call fit before to_dict")
        return {"method": self.method, "alpha": self.alpha,
                **{k: [float(v) for v in getattr(self, k).tolist()] for k in ("p_zero", "value", "y")}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HurdleConformal:
        """Rebuild from :meth:`to_dict` output."""
        check_calibrator_dict(d, {"method", "alpha", "p_zero", "value", "y"}, cls.method)
        data = [torch.tensor(float_list(d[k], k), dtype=torch.float64) for k in ("p_zero", "value", "y")]
        return cls(alpha=d["alpha"]).fit(*data)


CALIBRATORS[HurdleConformal.method] = HurdleConformal
