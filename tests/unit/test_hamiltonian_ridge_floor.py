"""The ridge's scale floor: a feature column nearly dead in training is not blown up on a geometry that wakes it.

Radial Gaussians at 0.9 and 1.9 Å (width 0.3 Å). Training waters are nearly linear: O–H 0.97 Å, H–H ≈ 1.9 Å, so the
H–H pair's 0.9 Å column is ``exp(-(1.0/0.3)²) ≈ 1.5e-5`` of its 1.9 Å column (and the O–H pair's 1.9 Å column
nearly dead the same way). Scaled to unit RMS (floor 0), such a column's weight is as free as the others', and at an
H–H distance of 1.0 Å (an unseen short contact; ozone's O–O bond in the organic set) its feature is ~1e5 times its
training size: the predicted ΔH explodes. With the floor the column keeps its raw scale, its weight is shrunk by λ
like any tiny column's, and the prediction stays of the size of the training corrections. Only the dead columns
change between the two geometries (O–H is 0.97 Å in both). λ = 100, strong as in the organic recipe (10⁴ on
thousands of rows): a column's weight is then set by how much it moved in training, which the floor measures in raw
units.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from sciml.hamiltonian.data.datamodule import bases, collate, structure_to_sample
from sciml.hamiltonian.orbitals import OrbitalLayout
from sciml.hamiltonian.structure import HamiltonianStructure
from sciml.hamiltonian.task import fit_ridge

LAYOUT = OrbitalLayout({8: (0, 0, 1, 2), 1: (0, 1)})
NUMBERS = np.array([8, 1, 1])


def _water(rng, half_angle: float, oh: float):
    pos = np.array([[0.0, 0.0, 0.0], [oh * np.sin(half_angle), oh * np.cos(half_angle), 0.0],
                    [-oh * np.sin(half_angle), oh * np.cos(half_angle), 0.0]]) + rng.normal(scale=0.02, size=(3, 3))
    n = int(LAYOUT.atom_offsets(NUMBERS)[-1])
    a, d = rng.normal(size=(n, n)), rng.normal(scale=0.01, size=(n, n))
    h0 = a + a.T
    s = np.eye(n)
    return HamiltonianStructure.from_dense(NUMBERS, pos, {"H0": h0, "S": s, "H": h0 + d + d.T}, LAYOUT,
                                           meta={"n_occupied": 3}, order="e3nn")


def _sample(structure):
    return structure_to_sample(structure, LAYOUT, *bases(LAYOUT))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    train = [_sample(_water(rng, np.radians(80.0), 0.97)) for _ in range(12)]  # H–H ≈ 1.9 Å
    short = collate([_sample(_water(rng, np.radians(31.0), 0.97))])  # H–H ≈ 1.0 Å
    return train, short


def _ridge_output(train, short, floor: float) -> tuple[float, float]:
    node_basis, edge_basis = bases(LAYOUT)
    dm = SimpleNamespace(datasets={"train": train}, node_basis=node_basis, edge_basis=edge_basis, collate_fn=collate)
    ridge = fit_ridge(dm, {"lmax": 2, "lam": 100.0, "centres": [0.9, 1.9], "width": 0.3, "scale_floor": floor})
    b = collate(train)
    target = float(torch.cat([(b.h_node - b.x_node).abs().flatten(), (b.h_edge - b.x_edge).abs().flatten()]).max())
    with torch.no_grad():
        node, edge = ridge(short.x_node, short.x_edge, short.vectors(), short.edge_index, short.node_type,
                           short.edge_type)
    return float(torch.cat([node.abs().flatten(), edge.abs().flatten()]).max()), target


def test_without_the_floor_an_unseen_short_bond_explodes(data):
    pred, target = _ridge_output(*data, floor=0.0)
    assert pred > 100 * target


def test_the_floor_keeps_the_prediction_at_the_size_of_the_training_corrections(data):
    pred, target = _ridge_output(*data, floor=1e-3)
    assert pred < 2 * target


def test_the_fit_summed_over_chunks_is_the_fit_on_one_batch(data, monkeypatch):
    import sciml.hamiltonian.task as task
    from sciml.hamiltonian.nn.ridge import TensorProductRidge

    train, _ = data
    node_basis, edge_basis = bases(LAYOUT)
    dm = SimpleNamespace(datasets={"train": train}, node_basis=node_basis, edge_basis=edge_basis, collate_fn=collate)
    settings = {"lmax": 2, "lam": 1e-3, "centres": [0.9, 1.9], "width": 0.3, "scale_floor": 1e-3}
    monkeypatch.setattr(task, "SUMMARY_CHUNK", 5)  # 12 waters: chunks of 5, 5 and 2
    chunked = fit_ridge(dm, settings)
    b = collate(train)
    whole = TensorProductRidge.from_settings(node_basis, edge_basis, settings)
    whole.fit(b.x_node, b.x_edge, b.vectors(), b.edge_index, b.node_type, b.edge_type, b.h_node - b.x_node,
              b.h_edge - b.x_edge, task.ridge_masks(dm), lam=settings["lam"])
    assert list(chunked.shapes) == list(whole.shapes) and chunked.shapes
    for name, value in whole.state_dict().items():
        torch.testing.assert_close(chunked.state_dict()[name], value, rtol=1e-5, atol=1e-7)  # float32 weights
