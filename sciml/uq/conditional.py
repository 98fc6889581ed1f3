r"""Coverage in every group at once, without the max-over-groups over-coverage: quantile regression on groups.

:class:`~sciml.uq.multigroup.MultiGroupConformal` covers each of several overlapping groupings (elements count,
cell size, crystal system) by taking the largest of the group thresholds, which over-covers most groups. The
conditional calibration of Gibbs, Cherian & Candès (2023, "Conformal prediction with conditional guarantees")
instead fits the threshold as a linear function of the group indicators ``φ(x) = [1, 1{g ∈ G(x)}]``:

.. math::  \hat θ = \arg\min_θ \sum_i ρ_{1-α}\big(s_i - φ(x_i)^\top θ\big), \qquad q(x) = φ(x)^\top \hat θ,

with the pinball loss ``ρ_τ(u) = max(τu, (τ-1)u)``, solved exactly as a linear programme (HiGHS). The first-order
conditions of this fit put a fraction ``1 - α`` of the calibration scores of *every* group below its threshold,
so coverage is ``1 - α`` in each group, not above it. This is the split version without the test-point
augmentation of the paper: its guarantee holds up to ``O(d / n_g)`` for a group of ``n_g`` calibration points
and ``d`` indicators, so groups with fewer than :data:`MIN_MEMBERS` calibration points get no indicator of their
own (they fall back on the intercept and the other groupings). A point in no calibrated group gets the intercept.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from ._checks import float_list
from .multigroup import MultiGroupConformal, _check_members
from .quantile import check_alpha
from .split import CALIBRATORS

__all__ = ["ConditionalConformal", "augmented_threshold", "coefficients_from_dict", "design_matrix", "fit_threshold",
           "quantile_regression"]

MIN_MEMBERS = 100  # calibration points a group needs for its own indicator (d/n_g <= 1%)


def quantile_regression(features: np.ndarray, scores: np.ndarray, tau: float,
                        extra: np.ndarray | None = None) -> np.ndarray | None:
    """Exact linear quantile regression ``argmin_θ Σ ρ_τ(s - Φθ)`` by linear programming.

    Parameters
    ----------
    features : np.ndarray, shape (n, d)
        Design matrix ``Φ``.
    scores : np.ndarray, shape (n,)
        Responses ``s``.
    tau : float
        Quantile level in ``(0, 1)``.
    extra : np.ndarray, shape (d,), optional
        Features ``φ*`` of one more point whose score is ``+inf``: the objective gains ``-τ φ*ᵀθ`` (its pinball
        loss up to a constant), as in the augmented fit of :func:`augmented_threshold`.

    Returns
    -------
    np.ndarray, shape (d,), or None
        Coefficients ``θ``; ``None`` when the objective is unbounded (only possible with ``extra``: the added
        point's threshold can grow without limit).

    """
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix, eye, hstack

    n, d = features.shape
    push = np.zeros(d) if extra is None else -tau * np.asarray(extra, dtype=np.float64)
    cost = np.concatenate([push, np.full(n, tau), np.full(n, 1.0 - tau)])  # θ, u⁺, u⁻
    a_eq = hstack([csr_matrix(features), eye(n), -eye(n)]).tocsr()
    bounds = [(None, None)] * d + [(0, None)] * (2 * n)
    res = linprog(cost, A_eq=a_eq, b_eq=scores, bounds=bounds, method="highs")
    if res.status in (2, 3) and extra is not None:  # the programme is always feasible: "infeasible or unbounded"
        return None
    if not res.success:
        raise RuntimeError(f"quantile regression failed: {res.message}")
    return res.x[:d]


def augmented_threshold(phi: Tensor, scores: Tensor, pattern: Tensor, alpha: float) -> float:
    r"""Threshold of a new point with features ``pattern`` from the fit that includes it at score ``+inf``.

    Gibbs, Cherian & Candès (2023) fit the quantile regression on the calibration scores *and* the test point
    (``φ*``, ``S``) and cover ``S`` when ``S <= φ*ᵀθ̂_S``; this holds with probability ``>= 1 - α`` in every
    group spanned by the indicators, in finite samples. ``φ*ᵀθ̂_S`` does not decrease in ``S``, so its limit
    ``S → +inf`` is a threshold at least as large: conservative by at most one point's share of the group,
    and exact in coverage unlike the split fit (which undercovers by ``O(d / n_g)``). One linear programme
    per distinct ``pattern``.

    Parameters
    ----------
    phi : Tensor, shape (n, d)
        Calibration design matrix.
    scores : Tensor, shape (n,)
        Calibration scores.
    pattern : Tensor, shape (d,)
        Design row ``φ*`` of the new point.
    alpha : float
        Miscoverage.

    Returns
    -------
    float
        ``φ*ᵀθ̂_∞``; ``inf`` when the programme is unbounded (too few calibration points share the pattern).

    """
    theta = quantile_regression(phi.numpy(), scores.numpy(), 1.0 - alpha, extra=pattern.numpy())
    return math.inf if theta is None else float(pattern.numpy() @ theta)


def design_matrix(members: Tensor, used: Tensor) -> Tensor:
    """``φ(x) = [1, 1{g ∈ G(x)}]`` float64 ``(m, 1 + used.sum())`` from memberships ``(m, G)`` and used columns."""
    return torch.cat([torch.ones(len(members), 1, dtype=torch.float64), members[:, used].double()], dim=1)


def fit_threshold(phi: Tensor, scores: Tensor, alpha: float) -> Tensor:
    """Coefficients ``θ`` float64 of the ``1 - α`` quantile regression of ``scores`` ``(n,)`` on ``phi``."""
    return torch.as_tensor(quantile_regression(phi.numpy(), scores.numpy(), 1.0 - alpha), dtype=torch.float64)


class ConditionalConformal(MultiGroupConformal):
    """Group-conditional split conformal by quantile regression on group indicators (module docstring).

    Same state, fitting and serialisation as :class:`~sciml.uq.multigroup.MultiGroupConformal` (scores ``(n,)``
    and memberships ``(n, G)``); only the threshold differs.
    """

    method = "conditional"

    def fit(self, scores: Tensor, members: Tensor, columns: list[tuple[str, int]] | None = None
            ) -> ConditionalConformal:
        """As :meth:`MultiGroupConformal.fit`; forgets the coefficients of an earlier fit."""
        self._theta: dict[float, Tensor] = {}
        return super().fit(scores, members, columns)

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        self._theta = {}  # new scores: the cached coefficients no longer hold
        super()._load_from_state_dict(state_dict, prefix, *args)

    def used_columns(self) -> Tensor:
        """Bool ``(G,)``: groups with at least :data:`MIN_MEMBERS` calibration points (they get an indicator)."""
        return self.members.sum(0) >= MIN_MEMBERS

    def coefficients(self, alpha: float | None = None) -> Tensor:
        """``θ`` ``(1 + G_used,)`` float64: intercept, then one coefficient per used group."""
        if self.scores.numel() == 0:
            raise RuntimeError("ConditionalConformal is not fitted; call fit(scores, members) first")
        alpha = check_alpha(self.alpha if alpha is None else alpha)
        cache = self.__dict__.setdefault("_theta", {})  # one linear programme per alpha, not per batch
        if alpha in cache:
            return cache[alpha]
        if not torch.isfinite(self.scores).all():
            raise ValueError("conditional calibration needs finite scores")
        cache[alpha] = fit_threshold(design_matrix(self.members, self.used_columns()), self.scores, alpha)
        return cache[alpha]

    def threshold(self, members: Tensor, alpha: float | None = None) -> Tensor:
        """``q(x) = φ(x)ᵀθ``, shape ``(m,)``, never below 0 (the scores are non-negative)."""
        members = _check_members(members)
        if members.shape[1] != self.members.shape[1]:
            raise ValueError(f"membership has {members.shape[1]} groups, the calibrator {self.members.shape[1]}")
        return (design_matrix(members, self.used_columns()) @ self.coefficients(alpha)).clamp_min(0.0)

    def to_dict(self) -> dict:
        """:meth:`MultiGroupConformal.to_dict` plus ``coefficients`` ``{alpha: θ}`` at the default alpha.

        Stored so that loading needs no linear programme.
        """
        return super().to_dict() | {"coefficients": {repr(self.alpha): self.coefficients().tolist()}}

    @classmethod
    def from_dict(cls, d) -> ConditionalConformal:
        """Rebuild from :meth:`to_dict` output (``coefficients`` optional); ``ValueError`` on a malformed field."""
        d = dict(d)
        stored = d.pop("coefficients", {})
        new = super().from_dict(d)
        new._theta = coefficients_from_dict(stored, 1 + int(new.used_columns().sum()))
        return new


def coefficients_from_dict(stored, size: int) -> dict[float, Tensor]:
    """``{alpha: θ}`` float64 tensors of length ``size`` from JSON ``{"0.1": [...]}``; ``ValueError`` otherwise."""
    if not isinstance(stored, dict):
        raise ValueError("'coefficients' must map an alpha to a list of numbers")
    out = {}
    for key, values in stored.items():
        alpha = check_alpha(float(key))
        theta = float_list(values, f"coefficients[{key}]")
        if len(theta) != size:
            raise ValueError(f"coefficients[{key}] has {len(theta)} values, the calibrator's groups need {size}")
        out[alpha] = torch.tensor(theta, dtype=torch.float64)
    return out


CALIBRATORS[ConditionalConformal.method] = ConditionalConformal
