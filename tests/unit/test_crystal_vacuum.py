"""Vacuum detection: slabs, molecules in a box and clusters are flagged; bulk crystals, layered ones too, are not."""

from __future__ import annotations

import numpy as np
from pymatgen.core import Lattice, Molecule, Structure

from sciml.crystal.vacuum import VACUUM_LIMIT, vacuum_gaps, vacuum_note


def _rocksalt() -> Structure:
    return Structure.from_spacegroup("Fm-3m", Lattice.cubic(5.64), ["Na", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5]])


def test_bulk_and_layered_crystals_have_no_vacuum():
    graphite = Structure(Lattice.hexagonal(2.46, 6.70), ["C"] * 4,
                         [[0, 0, 0.25], [0, 0, 0.75], [1 / 3, 2 / 3, 0.25], [2 / 3, 1 / 3, 0.75]])
    for s in (_rocksalt(), graphite, _rocksalt().make_supercell([3, 1, 1], in_place=False)):
        assert vacuum_note(s) == ""
        assert vacuum_gaps(s.frac_coords, s.lattice.matrix).max() < 4.0


def test_slab_molecule_and_cluster_are_flagged():
    bulk = _rocksalt()
    frac = bulk.frac_coords.copy()
    frac[:, 2] *= 5.64 / (5.64 + 15.0)  # two layers of rock salt, then 15 Å of vacuum along c
    slab = Structure(Lattice.tetragonal(5.64, 5.64 + 15.0), bulk.species, frac)
    assert "a slab" in vacuum_note(slab) and "along c" in vacuum_note(slab)
    water = Molecule(["O", "H", "H"], [[0, 0, 0], [0.96, 0, 0], [-0.24, 0.93, 0]])
    boxed = water.get_boxed_structure(20.0, 20.0, 20.0)
    assert "a molecule or cluster in a box" in vacuum_note(boxed)
    cluster = Structure(Lattice.cubic(5.64 + VACUUM_LIMIT), bulk.species, bulk.frac_coords * 5.64 / (5.64 + 10))
    assert "in a box" in vacuum_note(cluster)


def test_gap_is_measured_between_planes_in_angstrom():
    lattice = Lattice.hexagonal(3.0, 30.0)  # c along z: interplanar spacing of (001) is 30 Å
    gaps = vacuum_gaps(np.array([[0, 0, 0.1], [0, 0, 0.3]]), lattice.matrix)
    assert np.isclose(gaps[2], 0.8 * 30.0)
