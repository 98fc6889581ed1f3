"""Tie-robust neighbour graphs: an ideal high-symmetry crystal is treated like a tiny perturbation of itself."""

from __future__ import annotations

import numpy as np
import pytest
from pymatgen.core import Lattice, Structure

from sciml.crystal.data.graphs import GraphSettings, structure_to_graph

DISPLACEMENT = 1e-4  # Å: the prediction and p-value must not see it


def _diamond(displace: float = 0.0, seed: int = 0) -> Structure:
    s = Structure.from_spacegroup("Fd-3m", Lattice.cubic(3.567), ["C"], [[0, 0, 0]])
    if displace:
        rng = np.random.default_rng(seed)
        step = rng.normal(size=(len(s), 3))
        s = Structure(s.lattice, s.species, s.cart_coords + displace * step / np.linalg.norm(step, axis=1)[:, None],
                      coords_are_cartesian=True)
    return s


def _edges(structure: Structure) -> set:
    g = structure_to_graph(structure, GraphSettings())
    return {(int(i), int(j), *map(int, s)) for (i, j), s in zip(g.edge_index.T.tolist(), g.edge_shift.tolist(),
                                                                 strict=True)}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("displace", [DISPLACEMENT, 1e-3])  # both well inside the tie tolerance (0.01 Å)
def test_ideal_and_displaced_diamond_have_the_same_graph(seed, displace):
    ideal, moved = _edges(_diamond()), _edges(_diamond(displace, seed))
    assert len(ideal) == 16 * 8  # 4 first + 12 second neighbours per atom: the 12-th lies in a whole shell
    assert ideal == moved


def test_shipped_carbon_model_treats_ideal_diamond_like_its_perturbation():
    from sciml.crystal import predict

    rows = predict([_diamond(), _diamond(DISPLACEMENT, 0)], model="carbon24-energy")
    assert rows["error"].eq("").all()
    target = "energy_per_atom"
    assert abs(rows[target][0] - rows[target][1]) < 1e-6
    assert rows["domain_pvalue"][0] == pytest.approx(rows["domain_pvalue"][1], abs=1e-9)
    assert rows["in_domain"][0] == rows["in_domain"][1]
