"""Calibration groups of crystal models: crystal system and anion, and structures rebuilt from graph batches.

Importing this module registers the group functions with :mod:`sciml.uq.groups`, so a calibrator with
``group_by: crystal_system`` (Mondrian) or ``group_by: [crystal_system, anion]`` (multigroup) can label crystals.
Groups: ``crystal_system`` (0 triclinic … 6 cubic, pymatgen's spglib analysis at ``symprec = 0.1`` Å) and
``anion`` (atomic number of the most electronegative element, Pauling scale; the anion of ionic solids).
"""

from __future__ import annotations

from sciml.core import keys
from sciml.uq.groups import GROUP_FUNCTIONS, register_group_function

__all__ = ["CRYSTAL_SYSTEMS", "GROUP_FUNCTIONS", "anion", "crystal_system", "graph_structures"]

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


register_group_function("crystal_system", crystal_system)
register_group_function("anion", anion)


def graph_structures(batch) -> list:
    """Rebuild pymatgen structures from a batch of crystal graphs (``z``, ``pos``, ``cell``)."""
    from pymatgen.core import Lattice, Structure

    out = []
    for data in batch.to_data_list() if hasattr(batch, "to_data_list") else batch:
        cell = data[keys.CELL].reshape(3, 3).double().cpu().numpy()
        out.append(Structure(Lattice(cell), data[keys.ATOMIC_NUMBERS].tolist(),
                             data[keys.POS].double().cpu().numpy(), coords_are_cartesian=True))
    return out
