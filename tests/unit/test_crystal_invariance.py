"""Invariance of the crystal networks in float64: rotation (O(3)), translation, permutation, supercells."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pymatgen.core import Lattice, Structure
from pymatgen.symmetry.analyzer import SpacegroupAnalyzer

from sciml.crystal.data.graphs import GraphSettings
from sciml.crystal.nn import CGCNN, MeanEnsemble, PRDNet
from sciml.testing import assert_invariant, random_orthogonal, rotate
from sciml.testing.invariance import assert_same_output, network_output

SETTINGS = GraphSettings(cutoff=6.0, max_neighbors=12, g_max=3.5)
RTOL = 1e-8  # float64: observed errors are ~1e-14, far below this



def perovskite(perturb: float = 0.1, seed: int = 0) -> Structure:
    s = Structure(Lattice.cubic(3.9), ["Sr", "Ti", "O", "O", "O"],
                  [[0, 0, 0], [.5, .5, .5], [.5, .5, 0], [.5, 0, .5], [0, .5, .5]])
    rng = np.random.default_rng(seed)
    return Structure(s.lattice, s.species, s.frac_coords + rng.normal(scale=perturb / 3.9, size=(5, 3)))


def triclinic() -> Structure:
    lattice = Lattice.from_parameters(4.1, 5.3, 6.2, 78.0, 95.0, 104.0)
    rng = np.random.default_rng(1)
    return Structure(lattice, ["Li", "Fe", "P", "O", "O", "O"], rng.random((6, 3)))


def live(net: PRDNet) -> PRDNet:
    """Give the zero-initialised last layer of the diffraction embedding random weights.

    At initialisation the branch adds exactly zero (it grows in during training), so without this the
    invariance checks below would not see the branch at all.
    """
    torch.nn.init.normal_(net.diffraction.out[-1].weight, std=0.5)
    torch.nn.init.normal_(net.diffraction.out[-1].bias, std=0.5)
    return net


NETWORKS = {
    "prdnet": lambda: live(PRDNet(SETTINGS.cutoff, SETTINGS.g_max, dim=16, n_layers=2, ffn=True,
                                  edge_update=True)),
    "prdnet_plain_blocks": lambda: live(PRDNet(SETTINGS.cutoff, SETTINGS.g_max, dim=16, n_layers=2)),
    "prdnet_site_resolved": lambda: live(PRDNet(SETTINGS.cutoff, SETTINGS.g_max, dim=16, n_layers=2,
                                                site_resolved=True)),
    "prdnet_no_diffraction": lambda: PRDNet(SETTINGS.cutoff, SETTINGS.g_max, dim=16, n_layers=2,
                                            diffraction=False),
    "cgcnn": lambda: CGCNN(SETTINGS.cutoff, dim=16, n_layers=2),
    "ensemble": lambda: MeanEnsemble(SETTINGS.cutoff, SETTINGS.g_max, [
        {"name": "prdnet", "dim": 16, "n_layers": 2, "ffn": True, "edge_update": True},
        {"name": "cgcnn", "dim": 16, "n_layers": 2}]),
}


@pytest.mark.parametrize("name", NETWORKS)
@pytest.mark.parametrize("make", [perovskite, triclinic])
def test_invariant_to_rotation_translation_permutation_supercell(float64, name, make):
    net = NETWORKS[name]()
    assert_invariant(net, make(), SETTINGS, rtol=RTOL, seed=3)


@pytest.mark.parametrize("name", ["prdnet", "prdnet_site_resolved"])
def test_primitive_conventional_and_supercell_agree(float64, name):
    fcc = Structure(Lattice.cubic(5.64), ["Na"] * 4 + ["Cl"] * 4,
                    [[0, 0, 0], [.5, .5, 0], [.5, 0, .5], [0, .5, .5],
                     [.5, 0, 0], [0, .5, 0], [0, 0, .5], [.5, .5, .5]])
    primitive = SpacegroupAnalyzer(fcc).get_primitive_standard_structure()
    assert len(primitive) == 2
    net = NETWORKS[name]()
    net.eval()
    assert_same_output(net, primitive, fcc, SETTINGS, RTOL, "primitive vs conventional")
    assert_same_output(net, primitive, primitive.make_supercell([2, 2, 2], in_place=False), SETTINGS, RTOL,
                       "primitive vs 2x2x2")


def test_diffraction_branch_changes_the_output_and_sees_positions(float64):
    """The branch is live: the pattern depends on positions (unlike the released reference code)."""
    net = NETWORKS["prdnet"]()
    net.eval()
    a, b = perovskite(0.0), perovskite(0.15, seed=5)
    from torch_geometric.data import Batch

    from sciml.crystal.data.graphs import structure_to_graph

    batch = Batch.from_data_list([structure_to_graph(s, SETTINGS, dtype=torch.float64) for s in (a, b)])
    h = torch.randn(10, 16)
    pattern = net.diffraction.pattern(h[:5].repeat(2, 1), batch)
    assert not torch.allclose(pattern[0], pattern[1])
    assert torch.isfinite(pattern).all() and (pattern >= 0).all()
    live_output = net(batch)
    with torch.no_grad():
        net.diffraction.out[-1].weight.zero_()
        net.diffraction.out[-1].bias.zero_()
    assert not torch.allclose(live_output, net(batch)), "the branch must change the prediction"


def test_site_shares_sum_to_the_structure_pattern(float64):
    """Σ_j Re[conj(f_j e^{iφ_j}) F] = |F|²: the mean over sites of the site-resolved pattern is the pattern."""
    from torch_geometric.data import Batch

    from sciml.crystal.data.graphs import structure_to_graph
    from sciml.crystal.nn import DiffractionBranch

    total = DiffractionBranch(16, SETTINGS.g_max)
    sites = DiffractionBranch(16, SETTINGS.g_max, site_resolved=True)
    sites.load_state_dict(total.state_dict())
    batch = Batch.from_data_list([structure_to_graph(s, SETTINGS, dtype=torch.float64)
                                  for s in (triclinic(), perovskite(0.1))])
    h = torch.randn(len(batch.pos), 16)
    per_site = sites.pattern(h, batch)
    assert per_site.shape == (11, total.bins.n)
    mean = torch.stack([per_site[:6].mean(0), per_site[6:].mean(0)])
    torch.testing.assert_close(mean, total.pattern(h, batch), rtol=1e-10, atol=1e-12)
    assert (per_site < 0).any(), "site shares interfere: some must be negative"


def test_a_distorted_structure_is_not_invariant(float64):
    """Guard against a vacuous check: a real change of geometry must change the output."""
    net = NETWORKS["prdnet"]()
    net.eval()
    with pytest.raises(AssertionError):
        assert_same_output(net, perovskite(0.0), perovskite(0.2, seed=7), SETTINGS, RTOL, "distortion")


def test_gradients_flow_to_positions_and_cell(float64):
    from torch_geometric.data import Batch

    from sciml.crystal.data.graphs import structure_to_graph

    net = NETWORKS["prdnet"]()
    batch = Batch.from_data_list([structure_to_graph(triclinic(), SETTINGS, dtype=torch.float64)])
    batch.pos.requires_grad_(True)
    batch.cell.requires_grad_(True)
    net(batch).sum().backward()
    assert torch.isfinite(batch.pos.grad).all() and batch.pos.grad.abs().sum() > 0
    assert torch.isfinite(batch.cell.grad).all() and batch.cell.grad.abs().sum() > 0


def test_float32_invariance_within_single_precision():
    torch.manual_seed(0)
    net = NETWORKS["prdnet"]()
    net.eval()
    s = triclinic()
    out = network_output(net, [s, rotate(s, random_orthogonal(np.random.default_rng(2)))], SETTINGS)
    assert abs(float(out[0] - out[1])) <= 1e-4 * max(1.0, abs(float(out[0])))
