"""Group functions for Mondrian calibration of crystal models, and calibrator-agnostic fit/predict helpers.

A Mondrian calibrator may carry ``group_by``, the name of a function in :data:`GROUP_FUNCTIONS` mapping a
structure to an integer group. :func:`build_calibrator`, :func:`fit_calibrator` and :func:`predict_interval`
hide the difference between plain and group-conditional calibrators, so model code (export, prediction, the
``calibrate`` verb) never branches on the method: ``calibration: {method: mondrian, group_by: crystal_system}``
in a run config is enough.

Groups: ``crystal_system`` (0 triclinic … 6 cubic, pymatgen's spglib analysis at ``symprec = 0.1`` Å) and
``anion`` (atomic number of the most electronegative element, Pauling scale; the anion of ionic solids).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from .mondrian import MondrianConformal
from .multigroup import MultiGroupConformal
from .split import CALIBRATORS, SplitConformal

__all__ = ["GROUP_FUNCTIONS", "build_calibrator", "fit_calibrator", "graph_structures", "loader_structures",
           "predict_interval", "structure_groups", "structure_members"]

CRYSTAL_SYSTEMS = ("triclinic", "monoclinic", "orthorhombic", "tetragonal", "trigonal", "hexagonal", "cubic")


def crystal_system(structure) -> int:
    """Index of the crystal system in :data:`CRYSTAL_SYSTEMS` (spglib, ``symprec = 0.1`` Å)."""
    from pymatgen.symmetry.analyzer import SpacegroupAnalyzer

    try:
        name = SpacegroupAnalyzer(structure, symprec=0.1).get_crystal_system()
    except Exception:  # spglib failure on a distorted cell: lowest symmetry
        return 0
    return CRYSTAL_SYSTEMS.index(name)


def anion(structure) -> int:
    """Atomic number of the most electronegative element (ties: the heavier)."""
    return max(structure.composition.elements, key=lambda el: (el.X if el.X == el.X else 0.0, el.Z)).Z


GROUP_FUNCTIONS: dict[str, Callable[[Any], int]] = {"crystal_system": crystal_system, "anion": anion}


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


def graph_structures(batch) -> list:
    """Rebuild pymatgen structures from a batch of crystal graphs (``z``, ``pos``, ``cell``)."""
    from pymatgen.core import Lattice, Structure

    from sciml import keys

    out = []
    for data in batch.to_data_list() if hasattr(batch, "to_data_list") else batch:
        cell = data[keys.CELL].reshape(3, 3).double().cpu().numpy()
        out.append(Structure(Lattice(cell), data[keys.ATOMIC_NUMBERS].tolist(),
                             data[keys.POS].double().cpu().numpy(), coords_are_cartesian=True))
    return out


def build_calibrator(cfg: Mapping[str, Any] | None, score: str, alpha: float) -> nn.Module:
    """Calibrator from a config block ``{method: split|mondrian, group_by: name}`` (default split)."""
    cfg = dict(cfg or {})
    method = cfg.get("method", "split")
    if method == "split":
        return SplitConformal(score=score, alpha=alpha)
    if method == "mondrian":
        return MondrianConformal(score=score, alpha=alpha, group_by=cfg.get("group_by", "crystal_system"))
    if method == "multigroup":
        names = cfg.get("group_by", ["crystal_system", "anion"])
        names = names.split(",") if isinstance(names, str) else list(names)
        unknown = [n for n in names if n not in GROUP_FUNCTIONS]
        if unknown:
            raise ValueError(f"unknown group function(s) {unknown}; known: {sorted(GROUP_FUNCTIONS)}")
        return MultiGroupConformal(score=score, alpha=alpha, group_by=names)
    raise ValueError(f"calibration method {method!r} is not available for models; use one of ['mondrian', "
                     "'multigroup', 'split'] "
                     f"(all calibrators: {sorted(CALIBRATORS)})")


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


def loader_structures(cal: nn.Module, loader) -> list | None:
    """Structures of every graph in ``loader`` (in order) when ``cal`` groups by structure, else ``None``."""
    if getattr(cal, "group_by", None) is None:
        return None
    return [s for batch in loader for s in graph_structures(batch)]
