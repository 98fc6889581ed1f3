"""CrystalRegressor settings: retired network keys of old artifacts and checkpoints."""

from __future__ import annotations

import pytest

from sciml.crystal.model import RETIRED_NETWORK_KEYS
from sciml.crystal.module import CrystalRegressor
from sciml.crystal.nn import PRDNet

TARGET = {"name": "e", "unit": "eV", "extensive": False, "mean": 0.0, "std": 1.0}


def _module(**network):
    return CrystalRegressor({"name": "prdnet", "dim": 8, "n_layers": 1, "n_bins": 4, **network}, {}, TARGET, ["O"])


def test_retired_heads_is_dropped_and_not_saved_again():
    old, new = _module(heads=4), _module()
    assert "heads" in RETIRED_NETWORK_KEYS
    assert "heads" not in old.hparams["network"] and old.hparams == new.hparams  # a re-export no longer carries it
    assert old.state_dict().keys() == new.state_dict().keys()  # it never made parameters
    assert all(a.shape == b.shape for a, b in zip(old.state_dict().values(), new.state_dict().values(), strict=True))


def test_network_has_no_heads_argument():
    with pytest.raises(TypeError, match="heads"):
        PRDNet(8.0, 4.0, dim=8, heads=2)


ZERO_TARGET = TARGET | {"zero_inflated": True, "zero_label": "metal", "mean": 1.0, "std": 0.5}


def _rocksalt_batch():
    from pymatgen.core import Lattice, Structure

    from sciml.core.pyg import Batch
    from sciml.crystal.data.graphs import GraphSettings, structure_to_graph

    graphs = []
    for a in (4.0, 4.2, 4.4, 5.6):
        s = Structure.from_spacegroup("Fm-3m", Lattice.cubic(a), ["Na", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5]])
        graphs.append(structure_to_graph(s, GraphSettings(cutoff=6.0, g_max=2.0)))
    return Batch.from_data_list(graphs)


def test_zero_inflated_predictions_and_loss():
    import torch

    module = CrystalRegressor({"name": "prdnet", "dim": 8, "n_layers": 1, "n_bins": 4}, {"cutoff": 6.0, "g_max": 2.0},
                              ZERO_TARGET, ["Na", "Cl"])
    batch = _rocksalt_batch()
    with torch.no_grad():
        module.net.head[-1].bias.copy_(torch.tensor([-5.0, -50.0]))  # p0 small and a value far below 0
    pred = module.predict_step(batch)
    assert pred.mean.shape == (4,) and (pred.mean >= 0).all() and (pred.meta["positive"] >= 0).all()
    assert ((pred.meta["p_zero"] > 0) & (pred.meta["p_zero"] < 1)).all()
    batch.y = torch.tensor([0.0, 0.0, 1.5, 2.0])
    loss, err = module._standardised_loss(batch)
    assert torch.isfinite(loss) and err.shape == (4,)
    loss.backward()
    assert module.net.head[-1].weight.grad[0].abs().sum() > 0  # the logit learns from the zeros
    assert module.net.head[-1].weight.grad[1].abs().sum() > 0  # the value learns from the positives
