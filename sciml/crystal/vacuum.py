"""Vacuum in a periodic cell: slabs, molecules in a box and isolated clusters are not bulk crystals.

A bulk crystal fills its cell; a slab leaves an empty layer, a molecule or cluster in a box leaves empty space
in every direction. Along each lattice plane family ``i`` (reciprocal vector ``b_i``, interplanar spacing
``d_i = 1/|b_i|`` with ``b_i · a_j = δ_ij``) the atoms' fractional coordinates ``f_i`` split the period into
gaps; the widest gap times ``d_i`` is the thickness of empty space along that direction, Å. A structure whose
widest such gap reaches :data:`VACUUM_LIMIT` is not bulk; crystal models trained on bulk crystals flag it as out
of domain. Atoms are points: a layered bulk solid (graphite: 3.35 Å between layers) is far below the limit.
"""

from __future__ import annotations

import numpy as np

VACUUM_LIMIT = 10.0  # Å of empty space along one direction: a slab or an isolated molecule or cluster


def vacuum_gaps(frac: np.ndarray, lattice: np.ndarray) -> np.ndarray:
    """Widest empty layer along each of the three lattice plane families, Å.

    Parameters
    ----------
    frac : np.ndarray, shape (n, 3)
        Fractional coordinates of the atoms.
    lattice : np.ndarray, shape (3, 3)
        Lattice vectors as rows, Å.

    Returns
    -------
    np.ndarray, shape (3,)
        Thickness of the widest atom-free layer between consecutive planes of atoms, per direction (the
        whole interplanar period for one atom).

    """
    spacing = 1.0 / np.linalg.norm(np.linalg.inv(np.asarray(lattice, dtype=float)).T, axis=1)
    f = np.sort(np.mod(np.asarray(frac, dtype=float).reshape(-1, 3), 1.0), axis=0)
    gaps = np.diff(np.concatenate([f, f[:1] + 1.0]), axis=0)  # consecutive, with the wrap-around gap
    return gaps.max(axis=0) * spacing


def vacuum_note(structure, limit: float = VACUUM_LIMIT) -> str:
    """``""`` for a bulk structure, else why it is not one (e.g. ``"vacuum of 15.2 Å along b (a slab)"``)."""
    gaps = vacuum_gaps(structure.frac_coords, structure.lattice.matrix)
    empty = [(axis, gap) for axis, gap in zip("abc", gaps, strict=True) if gap >= limit]
    if not empty:
        return ""
    kind = {1: "a slab", 2: "a wire or chain", 3: "a molecule or cluster in a box"}[len(empty)]
    where = ", ".join(f"{gap:.1f} Å along {axis}" for axis, gap in empty)
    return f"vacuum of {where} ({kind}, not a bulk crystal)"
