"""Group-function registry for Mondrian calibration, and calibrator-agnostic fit/predict helpers.

A Mondrian calibrator may carry ``group_by``, the name of a function in :data:`GROUP_FUNCTIONS` mapping a
structure to an integer group. :func:`build_calibrator`, :func:`fit_calibrator` and :func:`predict_interval`
hide the difference between plain and group-conditional calibrators, so model code (export, prediction, the
``calibrate`` verb) never branches on the method: ``calibration: {method: mondrian, group_by: crystal_system}``
in a run config is enough.

Group functions are registered by the model families (crystal: ``crystal_system`` and ``anion``, in
:mod:`sciml.crystal.calibration`); this module knows none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from .conditional import ConditionalConformal
from .hurdle import HurdleConformal
from .hurdle_groups import ConditionalHurdleConformal
from .mondrian import MondrianConformal
from .multigroup import MultiGroupConformal
from .split import CALIBRATORS, SplitConformal

__all__ = ["GROUP_FUNCTIONS", "build_calibrator", "build_hurdle", "fit_calibrator", "hurdle_members",
           "loader_structures", "predict_interval", "register_group_function", "structure_groups", "structure_members"]

GROUP_FUNCTIONS: dict[str, Callable[[Any], int]] = {}
"""Group functions by name, ``item -> int``. Model families register theirs (``sciml.crystal.calibration``)."""


def register_group_function(name: str, fn: Callable[[Any], int]) -> Callable[[Any], int]:
    """Make ``fn`` (an item, e.g. a structure, to an integer group) available to calibrators as ``group_by: name``."""
    GROUP_FUNCTIONS[name] = fn
    return fn


def structure_groups(name: str, structures: Iterable) -> Tensor:
    """Integer group of each structure, int64 ``(n,)``; ``ValueError`` for an unknown group function."""
    if name not in GROUP_FUNCTIONS:
        raise ValueError(f"unknown group function {name!r}; known: {sorted(GROUP_FUNCTIONS)}")
    return torch.tensor([GROUP_FUNCTIONS[name](s) for s in structures], dtype=torch.int64)


def structure_members(names: list[str], structures: list,
                      columns: list[tuple[str, int]] | None = None) -> tuple[Tensor, list[tuple[str, int]]]:
    """Overlapping groups ``(name, value)`` of each structure: bool ``(n, G)`` and the column labels.

    Without ``columns`` (fitting) they are every ``(name, value)`` seen, sorted; with them (prediction) a
    structure whose value was never calibrated has no column for that function.
    """
    labels = {name: structure_groups(name, structures).tolist() for name in names}
    if columns is None:
        columns = sorted({(name, v) for name in names for v in labels[name]})
    members = torch.tensor([[labels[name][i] == v for name, v in columns] for i in range(len(structures))],
                           dtype=torch.bool).reshape(len(structures), len(columns))
    return members, columns


def build_calibrator(cfg: Mapping[str, Any] | None, score: str, alpha: float) -> nn.Module:
    """Calibrator from a config block ``{method: split|mondrian, group_by: name}`` (default split)."""
    cfg = dict(cfg or {})
    method = cfg.get("method", "split")
    if method == "split":
        return SplitConformal(score=score, alpha=alpha)
    if method == "mondrian":
        return MondrianConformal(score=score, alpha=alpha, group_by=cfg.get("group_by", "crystal_system"))
    if method in ("multigroup", "conditional"):
        names = _group_names(cfg, ["crystal_system", "anion"])
        kind = MultiGroupConformal if method == "multigroup" else ConditionalConformal
        return kind(score=score, alpha=alpha, group_by=names)
    raise ValueError(f"calibration method {method!r} is not available for models; use one of ['conditional', "
                     "'mondrian', 'multigroup', 'split'] "
                     f"(all calibrators: {sorted(CALIBRATORS)})")


def _group_names(cfg: Mapping[str, Any], default: list[str]) -> list[str]:
    names = cfg.get("group_by", default)
    names = names.split(",") if isinstance(names, str) else list(names)
    unknown = [n for n in names if n not in GROUP_FUNCTIONS]
    if unknown:
        raise ValueError(f"unknown group function(s) {unknown}; known: {sorted(GROUP_FUNCTIONS)}")
    return names


def build_hurdle(cfg: Mapping[str, Any] | None, alpha: float) -> HurdleConformal:
    """Calibrator of a zero-inflated model: ``method: conditional`` with ``group_by`` names, else class-wise only."""
    cfg = dict(cfg or {})
    method = cfg.get("method", "split")
    if method == "conditional":
        return ConditionalHurdleConformal(alpha, _group_names(cfg, ["n_elements"]))
    if method in ("split", "hurdle"):
        return HurdleConformal(alpha)
    raise ValueError(f"calibration method {method!r} is not available for zero-inflated targets; use 'split' "
                     "(class-wise hurdle sets) or 'conditional' (per group too)")


def hurdle_members(cal: HurdleConformal, structures: Iterable | None, fitting: bool = False) -> dict:
    """``{"members": (n, G) bool}`` (and ``columns`` when ``fitting``) for a grouped hurdle calibrator, else ``{}``.

    Spread into :meth:`~sciml.uq.hurdle_groups.ConditionalHurdleConformal.fit` or its ``predict_set`` / ``point``.
    """
    if getattr(cal, "group_by", None) is None:
        return {}
    members, columns = structure_members(cal.group_by, _need(cal, structures), None if fitting else cal.columns)
    return {"members": members, "columns": columns} if fitting else {"members": members}


def _need(cal: nn.Module, structures: Iterable | None) -> list:
    if structures is None:
        raise ValueError(f"the calibrator groups by {cal.group_by!r} and needs the structures")
    return list(structures)


def _groups(cal: nn.Module, structures: Iterable | None) -> Tensor | None:
    if getattr(cal, "group_by", None) is None:
        return None
    return structure_groups(cal.group_by, _need(cal, structures))


def fit_calibrator(cal: nn.Module, pred: Tensor, y: Tensor, sigma: Tensor | None,
                   structures: Iterable | None = None, groups: Tensor | None = None) -> nn.Module:
    """Fit ``cal`` on predictions, targets, ``σ`` (all ``(n,)``), with groups from ``structures`` if it has any.

    ``groups`` ``(n,)`` int64 may be given instead of ``structures`` (e.g. gathered across DDP ranks).
    """
    if isinstance(cal, MultiGroupConformal):
        members, columns = structure_members(cal.group_by, _need(cal, structures))
        return cal.fit_predictions(pred, y, members, sigma, columns)
    groups = groups if groups is not None and getattr(cal, "group_by", None) else _groups(cal, structures)
    if groups is None:
        return cal.fit_predictions(pred, y, sigma)
    return cal.fit_predictions(pred, y, groups, sigma)


def predict_interval(cal: nn.Module, pred: Tensor, sigma: Tensor | None, alpha: float | None,
                     structures: Iterable | None = None):
    """The calibrated set for ``pred`` ``(m,)``; group-conditional when ``cal`` has ``group_by``.

    A structure whose group had no calibration point gets the infinite interval: no guarantee is available.
    """
    if isinstance(cal, MultiGroupConformal):
        members, _ = structure_members(cal.group_by, _need(cal, structures), cal.columns)
        return cal.predict_set(pred, members, sigma, alpha)
    groups = _groups(cal, structures)
    if groups is None:
        return cal.predict_set(pred, sigma=sigma, alpha=alpha)
    return cal.score_fn.predict_set(pred, cal.threshold_or_inf(groups, alpha), sigma)  # unseen group: no bound


def loader_structures(cal: nn.Module, loader, to_items: Callable[[Any], list]) -> list | None:
    """Items (``to_items(batch)``, e.g. structures) of every batch of ``loader`` when ``cal`` groups, else ``None``."""
    if getattr(cal, "group_by", None) is None:
        return None
    return [s for batch in loader for s in to_items(batch)]
