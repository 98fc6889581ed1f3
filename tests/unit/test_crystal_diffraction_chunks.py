"""The diffraction branch evaluated in memory-bounded chunks equals the one-pass result (float64)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pymatgen.core import Lattice, Structure
from torch_geometric.data import Batch

from sciml.crystal.data.graphs import GraphSettings, structure_to_graph
from sciml.crystal.nn import DiffractionBranch
from sciml.crystal.nn.diffraction import reflection_chunks

SETTINGS = GraphSettings(cutoff=6.0, max_neighbors=12, g_max=3.5)



def perovskite(seed: int) -> Structure:
    rng = np.random.default_rng(seed)
    frac = np.array([[0, 0, 0], [.5, .5, .5], [.5, .5, 0], [.5, 0, .5], [0, .5, .5]])
    return Structure(Lattice.cubic(3.9), ["Sr", "Ti", "O", "O", "O"], frac + rng.normal(scale=0.03, size=(5, 3)))


def supercell_batch():
    """A 4x4x3 perovskite supercell (240 atoms) and a 5-atom cell in one batch."""
    big = perovskite(3).make_supercell([4, 4, 3], in_place=False)
    return Batch.from_data_list([structure_to_graph(s, SETTINGS, dtype=torch.float64)
                                 for s in (big, perovskite(4))])


def test_chunks_cover_every_reflection_once():
    counts = torch.tensor([5, 5, 5, 240, 240, 5])
    assert reflection_chunks(counts, 12) == [(0, 2), (2, 3), (3, 4), (4, 5), (5, 6)]
    assert reflection_chunks(counts, 10**9) == [(0, 6)]


@pytest.mark.parametrize("site_resolved", [False, True])
def test_chunked_pattern_and_gradient_equal_one_pass(float64, site_resolved):
    branch = DiffractionBranch(16, SETTINGS.g_max, n_bins=8, site_resolved=site_resolved)
    batch = supercell_batch()
    h = torch.randn(len(batch.pos), 16, requires_grad=True)
    whole = branch.pattern(h, batch, budget=2**40)
    (grad_whole,) = torch.autograd.grad(whole.square().sum(), h)
    budget = 20_000 * branch.bytes_per_pair(torch.float64)  # ~100 chunks of whole reflections
    chunked = branch.pattern(h, batch, budget=budget)
    (grad_chunked,) = torch.autograd.grad(chunked.square().sum(), h)
    torch.testing.assert_close(chunked, whole, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(grad_chunked, grad_whole, rtol=1e-10, atol=1e-10)
    with torch.no_grad():
        torch.testing.assert_close(branch.pattern(h, batch, budget=budget), whole, rtol=1e-10, atol=1e-10)
