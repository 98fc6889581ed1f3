r"""Zero-inflated sets covered in every group: the hurdle thresholds as quantile regressions on groups.

:class:`~sciml.uq.hurdle.HurdleConformal` calibrates one zero threshold ``t`` on the calibration zeros and one
half-width ``q`` on the positives, which covers zeros and positives on average but not in every group (a
half-width fitted on all compounds is too wide for elements and too narrow for quaternaries). Here both are
linear in the group indicators ``φ(x) = [1, 1{g ∈ G(x)}]`` and fitted by quantile regression (Gibbs, Cherian &
Candès 2023; :func:`~sciml.uq.conditional.quantile_regression`), class by class, with the set of
:mod:`sciml.uq.hurdle`:

.. math::  C(x) = \{0 : p₀ \ge t(x)\} \ \cup\ \big([\ell(x),\ v + q(x)] \cap (0, \infty)\big).

Each threshold of a new point is the *augmented* fit (:func:`~sciml.uq.conditional.augmented_threshold`): the
regression refitted with the point itself added at score ``+inf``, which covers ``>= 1 - α`` in every group in
finite samples (the split fit alone undercovers by ``O(d / n_g)``).

1. ``t(x) = -φ_t(x)ᵀθ̂`` from the zeros' scores ``-p₀`` plus the point: 0 is in the set for ``>= 1 - α`` of the
   zeros of every group.
2. The positives' scores (:mod:`sciml.uq.hurdle`) use the split fit ``t_s(x)`` of step 1, a fixed function of
   the zeros; ``q(x)`` is their augmented fit at the point. The set uses ``t(x) <= t_s(x)``, so its positive
   part contains the one ``q`` was calibrated for: ``>= 1 - α`` of the positives of every group.

Hence every group is covered at ``>= 1 - α`` as a whole, and at most ``O(d / n_g)`` above it. A group gets its
own indicator in a class only with :data:`~sciml.uq.conditional.MIN_MEMBERS` calibration points of that class.
A pattern that fewer than about ``1/α`` calibration points resemble within the span of the indicators (an
element in a grouping whose other values all have indicators: the intercept minus those isolates it) has an
unbounded augmented fit; it gets the class-wide threshold instead (the intercept alone: coverage ``>= 1 - α``
over its class, not its group), and :meth:`ConditionalHurdleConformal.class_wide` says which inputs those are.
One linear programme per class and distinct membership pattern; the thresholds of the patterns met at
calibration are stored, so that loading and predicting need none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from ._checks import check_calibrator_dict, float_list
from .conditional import MIN_MEMBERS, augmented_threshold, design_matrix, fit_threshold
from .hurdle import HurdleConformal, _q_scores, hurdle_set
from .multigroup import _check_members, members_from_lists, members_to_lists
from .quantile import check_alpha
from .sets import ZeroOrInterval
from .split import CALIBRATORS

__all__ = ["ConditionalHurdleConformal"]


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
        self._table: dict[float, dict[str, tuple[float, float, float]]] = {}
        self._theta_t: dict[float, Tensor] = {}

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
        self._table, self._theta_t = {}, {}
        return self

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        self._table, self._theta_t = {}, {}  # new calibration data: the cached thresholds no longer hold
        super()._load_from_state_dict(state_dict, prefix, *args)

    def _used(self) -> tuple[Tensor, Tensor]:
        """Bool ``(G,)`` each: the group columns of the positives' fit and of the zeros' fit."""
        zero = self.y <= 0
        return tuple(self.members[rows].sum(0) >= MIN_MEMBERS for rows in (~zero, zero))

    def _split_t(self, members: Tensor, alpha: float) -> Tensor:
        """The split zero threshold ``t_s`` ``(m,)`` of memberships ``(m, G)`` (step 2; ``+inf`` without zeros)."""
        zero = self.y <= 0
        if not zero.any():
            return torch.full((len(members),), torch.inf, dtype=torch.float64)
        used_t = self._used()[1]
        if alpha not in self._theta_t:
            self._theta_t[alpha] = fit_threshold(design_matrix(self.members[zero], used_t), -self.p_zero[zero], alpha)
        return -(design_matrix(members, used_t) @ self._theta_t[alpha])

    def _positive_scores(self, alpha: float) -> Tensor:
        """Scores of the calibration positives ``(n₊,)`` under the split zero threshold ``t_s`` (step 2)."""
        pos = self.y > 0
        return _q_scores(self.p_zero[pos], self.value[pos], self.y[pos], self._split_t(self.members[pos], alpha))

    def _pattern_thresholds(self, row: Tensor, alpha: float) -> tuple[float, float, float]:
        """``(t, q, class_wide)`` of one membership row ``(G,)`` by the augmented fits (module docstring).

        ``class_wide`` is 1.0 where a class's fit is unbounded at this pattern and its class-wide threshold is used.
        ``t`` is at most the split ``t_s`` of the row (automatic for the augmented fit, enforced for the class-wide
        one), so that the positive part contains the one ``q`` was calibrated for.
        """
        zero = self.y <= 0
        pos = ~zero
        used_q, used_t = self._used()
        t, q, wide_t, wide_q = math.inf, 0.0, False, False
        if zero.any():
            t, wide_t = _augmented(self.members[zero], -self.p_zero[zero], row, used_t, alpha)
            t = min(-t, float(self._split_t(row[None], alpha)[0]))
        if pos.any():
            q, wide_q = _augmented(self.members[pos], self._positive_scores(alpha), row, used_q, alpha)
            q = max(q, 0.0)
        return t, q, float(wide_t or wide_q)

    def point_thresholds(self, members: Tensor, alpha: float | None = None) -> tuple[Tensor, Tensor]:
        """``(t(x), q(x))`` for memberships ``(m, G)``, each ``(m,)`` float64; ``q >= 0``."""
        values = self._lookup(members, alpha)
        return values[:, 0], values[:, 1]

    def class_wide(self, members: Tensor, alpha: float | None = None) -> Tensor:
        """Bool ``(m,)``: inputs whose group pattern is too rare for its own bound and get a class-wide threshold.

        Too few calibration points resemble the pattern in the span of the indicators (about ``1/α``) for the
        augmented fit to be bounded; those inputs are covered at ``>= 1 - α`` over their class, not their group.
        """
        return self._lookup(members, alpha)[:, 2] > 0

    def _lookup(self, members: Tensor, alpha: float | None) -> Tensor:
        """``(m, 3)``: ``t``, ``q`` and the class-wide flag of each membership row, solving new patterns once."""
        if self.n_calib == 0:
            raise RuntimeError("ConditionalHurdleConformal is not fitted; call fit first")
        members = _check_members(members)
        if members.shape[1] != self.members.shape[1]:
            raise ValueError(f"membership has {members.shape[1]} groups, the calibrator {self.members.shape[1]}")
        alpha = check_alpha(self.alpha if alpha is None else alpha)
        table = self._table.setdefault(alpha, {})
        used = torch.logical_or(*self._used())
        if used.any():
            patterns, inverse = torch.unique(members[:, used], dim=0, return_inverse=True)
        else:  # no group has an indicator: one pattern, the intercept
            patterns, inverse = members[:1, used], torch.zeros(len(members), dtype=torch.long)
        values = torch.empty(len(patterns), 3, dtype=torch.float64)
        for k, pattern in enumerate(patterns):
            key = "".join("1" if b else "0" for b in pattern.tolist())
            if key not in table:
                row = torch.zeros(members.shape[1], dtype=torch.bool)
                row[used] = pattern
                table[key] = self._pattern_thresholds(row, alpha)
            values[k] = torch.tensor(table[key], dtype=torch.float64)
        return values[inverse]

    def predict_set(self, p_zero: Tensor, value: Tensor, alpha: float | None = None,
                    members: Tensor | None = None) -> ZeroOrInterval:
        """Sets for ``m`` inputs with ``p₀``, ``v`` ``(m,)`` and memberships ``(m, G)``; never below 0."""
        if members is None:
            raise ValueError("conditional hurdle sets need the group memberships of the inputs")
        return hurdle_set(p_zero, value, *self.point_thresholds(members, alpha))

    def thresholds(self, alpha: float | None = None) -> tuple[Tensor, Tensor]:
        """The thresholds of a point in no calibrated group, 0-dim each."""
        return tuple(x[0] for x in self.point_thresholds(torch.zeros(1, self.members.shape[1], dtype=torch.bool),
                                                         alpha))

    def to_dict(self) -> dict[str, Any]:
        """JSON: the plain hurdle's fields plus ``group_by``, ``columns`` and ``members`` (group indices per row).

        And ``thresholds`` ``{alpha: {pattern: [t, q, class_wide]}}``: the finite thresholds of the patterns met so
        far at the default alpha (at least those of the calibration set), so that loading needs no linear programme.
        """
        self.point_thresholds(self.members)
        table = {k: list(v) for k, v in self._table[self.alpha].items() if all(map(math.isfinite, v))}
        return super().to_dict() | {"group_by": self.group_by, "columns": [list(c) for c in self.columns],
                                    "members": members_to_lists(self.members),
                                    "thresholds": {repr(self.alpha): table}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ConditionalHurdleConformal:
        """Rebuild from :meth:`to_dict` output (``thresholds`` optional); ``ValueError`` on a malformed field."""
        d = dict(d)
        stored = d.pop("thresholds", {})
        check_calibrator_dict(d, {"method", "alpha", "p_zero", "value", "y", "group_by", "columns", "members"},
                              cls.method)
        data = [torch.tensor(float_list(d[k], k), dtype=torch.float64) for k in ("p_zero", "value", "y")]
        members, columns = members_from_lists(d["members"], d["columns"], len(data[0]))
        new = cls(alpha=d["alpha"], group_by=d["group_by"]).fit(*data, members, columns)
        new._table = _table_from_dict(stored, int((new._used()[0] | new._used()[1]).sum()))
        return new


def _augmented(members: Tensor, scores: Tensor, row: Tensor, used: Tensor, alpha: float) -> tuple[float, bool]:
    """Augmented threshold of ``row`` from one class's ``members`` and ``scores``, and whether it is class-wide.

    Where the fit on the group indicators is unbounded, the intercept alone: the conformal quantile of the class.
    """
    value = augmented_threshold(design_matrix(members, used), scores, design_matrix(row[None], used)[0], alpha)
    if math.isfinite(value):
        return value, False
    ones = torch.ones(len(scores), 1, dtype=torch.float64)
    return augmented_threshold(ones, scores, ones[0], alpha), True


def _table_from_dict(stored: Any, width: int) -> dict[float, dict[str, tuple[float, float]]]:
    """``{alpha: {pattern: (t, q, class_wide)}}`` from JSON; ``ValueError`` on a malformed entry."""
    if not isinstance(stored, dict):
        raise ValueError("'thresholds' must map an alpha to {pattern: [t, q, class_wide]}")
    out = {}
    for key, table in stored.items():
        if not isinstance(table, dict):
            raise ValueError(f"thresholds[{key}] must map membership patterns to [t, q, class_wide]")
        out[check_alpha(float(key))] = {}
        for pattern, entry in table.items():
            entry = float_list(entry, f"thresholds[{key}][{pattern!r}]")
            if len(pattern) != width or set(pattern) - {"0", "1"} or len(entry) != 3 or entry[2] not in (0.0, 1.0):
                raise ValueError(f"thresholds[{key}][{pattern!r}]: a pattern is {width} characters 0/1 with "
                                 "[t, q, class_wide (0 or 1)]")
            out[check_alpha(float(key))][pattern] = tuple(entry)
    return out


CALIBRATORS[ConditionalHurdleConformal.method] = ConditionalHurdleConformal
