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
