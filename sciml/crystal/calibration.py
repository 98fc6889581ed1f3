"""Calibration groups of crystal models: crystal system, anion, cell size; structures rebuilt from graph batches.

Importing this module registers the group functions with :mod:`sciml.uq.groups`, so a calibrator with
``group_by: crystal_system`` (Mondrian) or ``group_by: [crystal_system, anion]`` (multigroup) can label crystals.
Groups: ``crystal_system`` (0 triclinic … 6 cubic, pymatgen's spglib analysis at ``symprec = 0.1`` Å),
``anion`` (atomic number of the most electronegative element, Pauling scale; the anion of ionic solids) and
``cell_size`` (the number of atoms in the cell), ``n_elements`` (1, 2, 3, 4+) and ``size_range`` (cell sizes in
powers of two: 1, 2-3, 4-7, ..., 64+ atoms).

Cell-size bins. Prediction errors of an intensive target (eV/atom) depend on the cell size, so one threshold
over-covers some sizes and under-covers others. ``group_by: cell_size`` in a config asks :func:`resolve_group_by`
(called by the crystal export) to choose bins from the *calibration* structures: sizes in increasing order
are merged greedily until each bin holds at least ``min_count`` (default 20) calibration structures, a short
last bin joining the previous one. The calibrator then stores the resolved name ``cell_size:6,8,10`` (the
lower edge of each bin; bin ``g`` holds ``edge_g <= n_atoms < edge_{g+1}``, sizes below the first edge join
the first bin), which :func:`ensure_group_function` re-registers when the artifact is loaded.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections import Counter

from sciml.core import keys
from sciml.uq.groups import GROUP_FUNCTIONS, register_group_function

__all__ = ["CELL_SIZE", "CRYSTAL_SYSTEMS", "GROUP_FUNCTIONS", "anion", "cell_size", "cell_size_edges",
           "crystal_system", "ensure_group_function", "graph_structures", "n_elements", "resolve_group_by",
           "size_range"]

CELL_SIZE = "cell_size"
MIN_BIN_COUNT = 20  # calibration structures per size bin: finite 90% intervals need 9, 95% need 19

CRYSTAL_SYSTEMS = ("triclinic", "monoclinic", "orthorhombic", "tetragonal", "trigonal", "hexagonal", "cubic")


def crystal_system(structure) -> int:
    """Index of the crystal system in :data:`CRYSTAL_SYSTEMS` (spglib, ``symprec = 0.1`` Å)."""
    from pymatgen.symmetry.analyzer import SpacegroupAnalyzer

    os.environ.setdefault("SPGLIB_WARNING", "OFF")  # spglib's C warnings on distorted cells: the fallback says it
    try:
        name = SpacegroupAnalyzer(structure, symprec=0.1).get_crystal_system()
    except Exception:  # spglib failure on a distorted cell: lowest symmetry
        return 0
    return CRYSTAL_SYSTEMS.index(name)


def anion(structure) -> int:
    """Atomic number of the most electronegative element (ties: the heavier)."""
    return max(structure.composition.elements, key=lambda el: (el.X if el.X == el.X else 0.0, el.Z)).Z


def cell_size(structure) -> int:
    """Number of atoms in the cell."""
    return len(structure)


def n_elements(structure) -> int:
    """Number of distinct elements, capped at 4 (groups: unary, binary, ternary, 4 or more)."""
    return min(len(structure.composition.elements), 4)


def size_range(structure) -> int:
    """Cell-size range ``floor(log2(n_atoms))``, capped at 6: 1, 2-3, 4-7, 8-15, 16-31, 32-63, 64+ atoms."""
    return min(len(structure).bit_length() - 1, 6)


def cell_size_edges(sizes, min_count: int = MIN_BIN_COUNT) -> list[int]:
    """Lower edges of cell-size bins holding at least ``min_count`` of ``sizes`` each (module docstring).

    Parameters
    ----------
    sizes : iterable of int
        Cell sizes (atoms) of the calibration structures.
    min_count : int
        Smallest number of calibration structures per bin; fewer in total gives one bin.

    Returns
    -------
    list of int
        Increasing lower edges, the first one the smallest size.

    """
    counts = Counter(int(n) for n in sizes)
    if not counts:
        raise ValueError("no calibration structures to choose cell-size bins from")
    edges, filled = [], min_count  # start a new bin at the first size
    for n in sorted(counts):
        if filled >= min_count:
            edges.append(n)
            filled = 0
        filled += counts[n]
    if filled < min_count and len(edges) > 1:
        edges.pop()  # a short last bin joins the previous one
    return edges


def _binned(edges: list[int]):
    def group(structure) -> int:
        return max(bisect_right(edges, len(structure)) - 1, 0)

    return group


def ensure_group_function(name: str | None) -> None:
    """Register a resolved ``cell_size:e1,e2,...`` group function (no-op for other names or ``None``).

    Raises
    ------
    ValueError
        A ``cell_size:`` name whose edges are not increasing integers.

    """
    if not isinstance(name, str) or not name.startswith(CELL_SIZE + ":") or name in GROUP_FUNCTIONS:
        return
    try:
        edges = [int(e) for e in name.split(":", 1)[1].split(",")]
    except ValueError:
        edges = []
    if not edges or edges != sorted(set(edges)) or edges[0] < 1:
        raise ValueError(f"group function {name!r}: expected cell_size:<increasing positive integers>")
    register_group_function(name, _binned(edges))


def resolve_group_by(calibration: dict | None, structures: list, min_count: int = MIN_BIN_COUNT) -> dict:
    """The calibration block with ``group_by: cell_size`` replaced by bins chosen from ``structures``."""
    calibration = dict(calibration or {})
    if calibration.get("group_by") != CELL_SIZE or calibration.get("method", "split") != "mondrian":
        return calibration
    edges = cell_size_edges([len(s) for s in structures], min_count)
    name = f"{CELL_SIZE}:{','.join(map(str, edges))}"
    ensure_group_function(name)
    return calibration | {"group_by": name}


register_group_function("crystal_system", crystal_system)
register_group_function("anion", anion)
register_group_function(CELL_SIZE, cell_size)
register_group_function("n_elements", n_elements)
register_group_function("size_range", size_range)


def graph_structures(batch) -> list:
    """Rebuild pymatgen structures from a batch of crystal graphs (``z``, ``pos``, ``cell``)."""
    from pymatgen.core import Lattice, Structure

    out = []
    for data in batch.to_data_list() if hasattr(batch, "to_data_list") else batch:
        cell = data[keys.CELL].reshape(3, 3).double().cpu().numpy()
        out.append(Structure(Lattice(cell), data[keys.ATOMIC_NUMBERS].tolist(),
                             data[keys.POS].double().cpu().numpy(), coords_are_cartesian=True))
    return out
