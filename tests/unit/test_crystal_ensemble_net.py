"""MeanEnsemble: the mean of its members' outputs, the first member's representation, clear errors."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Batch

from sciml.crystal.data.graphs import GraphSettings, structure_to_graph
from sciml.crystal.nn import MeanEnsemble
from tests.unit.test_crystal_invariance import perovskite, triclinic

SETTINGS = GraphSettings(cutoff=6.0, max_neighbors=12, g_max=3.5)
MEMBERS = [{"name": "prdnet", "dim": 16, "n_layers": 2}, {"name": "prdnet", "dim": 8, "n_layers": 1},
           {"name": "cgcnn", "dim": 16, "n_layers": 2}]


@pytest.mark.parametrize("n_out", [1, 2])
def test_output_is_the_mean_of_the_members(float64, n_out):
    net = MeanEnsemble(SETTINGS.cutoff, SETTINGS.g_max, MEMBERS, n_out=n_out).eval()
    batch = Batch.from_data_list([structure_to_graph(s, SETTINGS, dtype=torch.float64)
                                  for s in (perovskite(0.1), triclinic())])
    outputs = torch.stack([member(batch) for member in net.members])
    assert outputs.shape == ((3, 2) if n_out == 1 else (3, 2, n_out))
    assert not torch.allclose(outputs[0], outputs[1]), "independent members must differ"
    torch.testing.assert_close(net(batch), outputs.sum(0) / 3, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(net.embed(batch), net.members[0].embed(batch), rtol=0, atol=0)
    assert net.head is net.members[0].head


@pytest.mark.parametrize("members, match", [
    (MEMBERS[:1], "at least 2 members"),
    ([MEMBERS[0], {"name": "schnet", "dim": 8}], "member 1: unknown network 'schnet'"),
    ([MEMBERS[0], {"name": "ensemble", "members": MEMBERS}], "member 1: unknown network 'ensemble'"),
])
def test_bad_members_are_refused(members, match):
    with pytest.raises(ValueError, match=match):
        MeanEnsemble(SETTINGS.cutoff, SETTINGS.g_max, members)
