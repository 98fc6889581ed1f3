r"""Zero-inflated intervals covered in every group: the hurdle thresholds as quantile regressions on groups.

:class:`~sciml.uq.hurdle.HurdleConformal` calibrates one zero threshold ``t`` on the calibration zeros and one
half-width ``q`` on the positives, which covers zeros and positives on average but not in every group (a
half-width fitted on all compounds is too wide for elements and too narrow for quaternaries). Here both are
linear in the group indicators ``φ(x) = [1, 1{g ∈ G(x)}]`` and fitted by quantile regression (Gibbs, Cherian &
Candès 2023; :func:`~sciml.uq.conditional.quantile_regression`), class by class:

.. math::  q(x) = φ(x)^\top θ_q \ \text{(positives' scores)}, \qquad t(x) = -φ(x)^\top θ_t \ \text{(zeros' scores)},

with the scores of :mod:`sciml.uq.hurdle` and the set

.. math::  C(x) = [0,\ v + q(x)]\ \text{if}\ p₀ \ge t(x), \quad [\max(v - q(x), 0),\ v + q(x)]\ \text{otherwise}.

The first-order conditions of each fit put a fraction ``1 - α`` of the scores of every group of one class below
its threshold, so zeros and positives are each covered at ``1 - α`` in every group, hence every group as a whole,
up to ``O(d / n_g)`` (split version, no test-point augmentation). A group gets its own indicator in a class only
with :data:`~sciml.uq.conditional.MIN_MEMBERS` calibration points of that class. As in the plain hurdle, ``t`` and
``q`` are fitted in turn until neither changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from ._checks import check_calibrator_dict, float_list
from .conditional import MIN_MEMBERS, coefficients_from_dict, design_matrix, fit_threshold
from .hurdle import MAX_ROUNDS, HurdleConformal, _q_scores, hurdle_interval
from .multigroup import _check_members, members_from_lists, members_to_lists
from .quantile import check_alpha
from .sets import Interval
from .split import CALIBRATORS

__all__ = ["ConditionalHurdleConformal"]

COVERED = -2.0  # zero-class score of a zero covered whatever t (v <= q): below every -p₀, finite for the programme


class ConditionalHurdleConformal(HurdleConformal):
    """Group-conditional hurdle sets (module docstring).

    Parameters
    ----------
    alpha : float
        Default miscoverage.
    group_by : list of str, optional
        Group-function names (for model code; :func:`sciml.uq.groups.structure_members` turns structures into
        memberships).

    Buffers ``p_zero``, ``value``, ``y`` ``(n,)`` and ``members`` ``(n, G)`` bool hold the calibration set;
    ``columns`` labels the group columns ``(function name, value)``.

    """

    method = "conditional_hurdle"

    def __init__(self, alpha: float = 0.1, group_by: list[str] | None = None) -> None:
        super().__init__(alpha)
        self.group_by = None if group_by is None else list(group_by)
        self.columns: list[tuple[str, int]] = []
        self.register_buffer("members", torch.zeros(0, 0, dtype=torch.bool))
        self._fits: dict[float, tuple[Tensor, Tensor, Tensor, Tensor]] = {}

    def fit(self, p_zero: Tensor, value: Tensor, y: Tensor, members: Tensor | None = None,
            columns: list[tuple[str, int]] | None = None) -> ConditionalHurdleConformal:
        """Store calibration ``p₀``, ``v``, ``y`` ``(n,)`` and group memberships ``(n, G)``; returns ``self``."""
        super().fit(p_zero, value, y)
        if members is None:
            raise ValueError("conditional hurdle calibration needs the group memberships of the calibration set")
        members = _check_members(members, self.n_calib)
        if columns is not None and len(columns) != members.shape[1]:
            raise ValueError(f"{len(columns)} column labels for {members.shape[1]} groups")
        self.members = members
        self.columns = [] if columns is None else [(str(n), int(v)) for n, v in columns]
        self._fits = {}
        return self

    def coefficients(self, alpha: float | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(θ_q, used_q, θ_t, used_t)``: coefficients and the group columns each class's fit uses."""
        if self.n_calib == 0:
            raise RuntimeError("ConditionalHurdleConformal is not fitted; call fit first")
        alpha = check_alpha(self.alpha if alpha is None else alpha)
        fits = self.__dict__.setdefault("_fits", {})
        if alpha not in fits:
            fits[alpha] = self._fit_thresholds(alpha)
        return fits[alpha]

    def _fit_thresholds(self, alpha: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        zero = self.y <= 0
        pos = ~zero
        used_q, used_t = self._used()
        phi_q, phi_t = design_matrix(self.members, used_q), design_matrix(self.members, used_t)
        theta_q, theta_t = (torch.zeros(phi.shape[1], dtype=torch.float64) for phi in (phi_q, phi_t))
        t = torch.full_like(self.y, 0.5)
        for _ in range(MAX_ROUNDS):
            new_q = fit_threshold(phi_q[pos], _q_scores(self.p_zero[pos], self.value[pos], self.y[pos], t[pos]),
                                  alpha) if pos.any() else torch.zeros_like(theta_q)
            q = (phi_q @ new_q).clamp_min(0.0)
            scores_t = torch.where(self.value <= q, torch.full_like(q, COVERED), -self.p_zero)
            new_t = fit_threshold(phi_t[zero], scores_t[zero], alpha) if zero.any() else \
                torch.cat([torch.tensor([-torch.inf], dtype=torch.float64), theta_t[1:]])  # no zeros: t = +inf
            t = -(phi_t @ new_t)
            if torch.equal(new_q, theta_q) and torch.equal(new_t, theta_t):
                break
            theta_q, theta_t = new_q, new_t
        return theta_q, used_q, theta_t, used_t

    def point_thresholds(self, members: Tensor, alpha: float | None = None) -> tuple[Tensor, Tensor]:
        """``(t(x), q(x))`` for memberships ``(m, G)``, each ``(m,)``; ``q >= 0``."""
        members = _check_members(members)
        if members.shape[1] != self.members.shape[1]:
            raise ValueError(f"membership has {members.shape[1]} groups, the calibrator {self.members.shape[1]}")
        theta_q, used_q, theta_t, used_t = self.coefficients(alpha)
        return -(design_matrix(members, used_t) @ theta_t), (design_matrix(members, used_q) @ theta_q).clamp_min(0.0)

    def predict_set(self, p_zero: Tensor, value: Tensor, alpha: float | None = None,
                    members: Tensor | None = None) -> Interval:
        """Interval for ``m`` inputs with ``p₀``, ``v`` ``(m,)`` and memberships ``(m, G)``; never below 0."""
        if members is None:
            raise ValueError("conditional hurdle sets need the group memberships of the inputs")
        return hurdle_interval(p_zero, value, *self.point_thresholds(members, alpha))

    def thresholds(self, alpha: float | None = None) -> tuple[Tensor, Tensor]:
        """The thresholds of a point in no calibrated group (the intercepts), 0-dim each."""
        return tuple(x[0] for x in self.point_thresholds(torch.zeros(1, self.members.shape[1], dtype=torch.bool),
                                                         alpha))

    def _used(self) -> tuple[Tensor, Tensor]:
        zero = self.y <= 0
        return tuple(self.members[rows].sum(0) >= MIN_MEMBERS for rows in (~zero, zero))

    def to_dict(self) -> dict[str, Any]:
        """JSON: the plain hurdle's fields plus ``group_by``, ``columns`` and ``members`` (group indices per row).

        And ``coefficients`` ``{"q"|"t": {alpha: θ}}`` at the default alpha, so that loading needs no linear programme.
        """
        theta_q, _, theta_t, _ = self.coefficients()
        return super().to_dict() | {"group_by": self.group_by, "columns": [list(c) for c in self.columns],
                                    "members": members_to_lists(self.members),
                                    "coefficients": {"q": {repr(self.alpha): theta_q.tolist()},
                                                     "t": {repr(self.alpha): theta_t.tolist()}}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ConditionalHurdleConformal:
        """Rebuild from :meth:`to_dict` output (``coefficients`` optional); ``ValueError`` on a malformed field."""
        d = dict(d)
        stored = d.pop("coefficients", {"q": {}, "t": {}})
        check_calibrator_dict(d, {"method", "alpha", "p_zero", "value", "y", "group_by", "columns", "members"},
                              cls.method)
        data = [torch.tensor(float_list(d[k], k), dtype=torch.float64) for k in ("p_zero", "value", "y")]
        members, columns = members_from_lists(d["members"], d["columns"], len(data[0]))
        new = cls(alpha=d["alpha"], group_by=d["group_by"]).fit(*data, members, columns)
        if not isinstance(stored, dict) or set(stored) != {"q", "t"}:
            raise ValueError("'coefficients' must hold 'q' and 't', each mapping an alpha to a list of numbers")
        used_q, used_t = new._used()
        theta_q = coefficients_from_dict(stored["q"], 1 + int(used_q.sum()))
        theta_t = coefficients_from_dict(stored["t"], 1 + int(used_t.sum()))
        new._fits = {a: (theta_q[a], used_q, theta_t[a], used_t) for a in theta_q.keys() & theta_t.keys()}
        return new


CALIBRATORS[ConditionalHurdleConformal.method] = ConditionalHurdleConformal
