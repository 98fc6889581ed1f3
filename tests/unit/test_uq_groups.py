"""Group functions for Mondrian by crystal family; calibrator-agnostic build/fit/predict helpers."""

from __future__ import annotations

import json
import math

import pytest
import torch

from sciml.crystal.calibration import CRYSTAL_SYSTEMS, graph_structures
from sciml.testing.fixtures import perovskite
from sciml.uq import MondrianConformal, SplitConformal, calibrator_from_dict
from sciml.uq.groups import build_calibrator, fit_calibrator, predict_interval, structure_groups


def test_group_functions_on_perovskites() -> None:
    """Ideal cubic ABO3 is cubic with anion O; a strained cell is tetragonal; fluorides group apart."""
    from pymatgen.core import Lattice

    cubic = perovskite("Sr", "Ti")
    strained = cubic.copy()
    strained.lattice = Lattice.tetragonal(3.95, 4.3)
    fluoride = perovskite("K", "Mg", "F")
    assert structure_groups("crystal_system", [cubic, strained]).tolist() == [
        CRYSTAL_SYSTEMS.index("cubic"), CRYSTAL_SYSTEMS.index("tetragonal")]
    assert structure_groups("anion", [cubic, fluoride]).tolist() == [8, 9]
    with pytest.raises(ValueError, match="unknown group function"):
        structure_groups("colour", [cubic])


def test_graph_structures_round_trip() -> None:
    """Structures rebuilt from crystal graphs keep species and crystal system."""
    from torch_geometric.data import Batch

    from sciml.crystal.data.graphs import GraphSettings, structure_to_graph

    s = [perovskite("Ba", "Zr"), perovskite("K", "Mg", "F")]
    batch = Batch.from_data_list([structure_to_graph(x, GraphSettings.from_dict({})) for x in s])
    back = graph_structures(batch)
    assert [b.composition.reduced_formula for b in back] == ["BaZrO3", "KMgF3"]
    assert structure_groups("anion", back).tolist() == [8, 9]


def test_build_fit_predict_without_branching() -> None:
    """The same three calls serve split and Mondrian; Mondrian stores group_by and round-trips it."""
    structures = [perovskite("Sr", "Ti"), perovskite("K", "Mg", "F")] * 20
    g = torch.Generator().manual_seed(0)
    pred = torch.randn(40, generator=g, dtype=torch.float64)
    y = pred + torch.where(torch.arange(40) % 2 == 0, 0.1, 2.0).double() * torch.randn(40, generator=g)
    split = build_calibrator(None, "absolute", 0.1)
    mond = build_calibrator({"method": "mondrian", "group_by": "anion"}, "absolute", 0.1)
    assert isinstance(split, SplitConformal) and isinstance(mond, MondrianConformal)
    for cal in (split, mond):
        fit_calibrator(cal, pred, y, None, structures)
    widths = predict_interval(mond, pred[:2], None, 0.1, structures[:2]).size()
    assert widths[1] > widths[0]  # the noisy fluorides get the wider interval
    again = calibrator_from_dict(json.loads(json.dumps(mond.to_dict())))
    assert again.group_by == "anion"
    assert torch.equal(predict_interval(again, pred[:2], None, 0.1, structures[:2]).size(), widths)
    unseen = predict_interval(mond, pred[:1], None, 0.1, [perovskite("Sr", "Ti", "Cl")])
    assert unseen.size().item() == math.inf  # a group without calibration data gets no finite bound
    with pytest.raises(ValueError, match="needs the structures"):
        predict_interval(mond, pred[:1], None, 0.1, None)
    with pytest.raises(ValueError, match="calibration method 'aci'"):
        build_calibrator({"method": "aci"}, "absolute", 0.1)


def test_conformal_callback_mondrian_from_config(tmp_path) -> None:
    """The Lightning callback follows a `calibration: {method: mondrian, group_by: anion}` block."""
    from types import SimpleNamespace

    import lightning as L
    from torch_geometric.loader import DataLoader

    from sciml.core import keys
    from sciml.core.training.conformal import ConformalCallback
    from sciml.core.types import Prediction
    from sciml.crystal.calibration import graph_structures
    from sciml.crystal.data.graphs import GraphSettings, structure_to_graph

    class Zero(L.LightningModule):
        def predict_step(self, batch, batch_idx=0):
            return Prediction(mean=torch.zeros(batch.num_graphs))

    class GroupedZero(Zero):
        def batch_items(self, batch):  # the crystal family's items: one structure per graph
            return graph_structures(batch)

    graphs = []
    for i, s in enumerate([perovskite("Sr", "Ti"), perovskite("K", "Mg", "F")] * 15):
        data = structure_to_graph(s, GraphSettings.from_dict({}))
        data[keys.TARGET] = torch.tensor([0.1 * (i % 7) * (1 if i % 2 == 0 else 10)])
        graphs.append(data)
    loader = DataLoader(graphs, batch_size=8)
    trainer = SimpleNamespace(checkpoint_callback=None, datamodule=SimpleNamespace(calib_dataloader=lambda: loader),
                              world_size=1, global_rank=0, is_global_zero=True)
    cb = ConformalCallback(str(tmp_path), "absolute", 0.2, {"method": "mondrian", "group_by": "anion"})
    with pytest.raises(ValueError, match="has no batch_items"):  # uq knows no structures: the module says
        cb.on_fit_end(trainer, Zero())
    cb.on_fit_end(trainer, GroupedZero())
    saved = json.loads((tmp_path / "calibrator.json").read_text())
    assert saved["method"] == "mondrian" and saved["group_by"] == "anion" and saved["groups"] == [8, 9]
    q = cb.calibrator.threshold()
    assert q[1] > 5 * q[0]  # the fluorides' residuals are 10x larger


def test_multigroup_crystal_system_and_anion() -> None:
    """Overlapping groups from two functions: columns (name, value); q = max over a structure's groups; JSON."""
    structures = [perovskite("Sr", "Ti"), perovskite("K", "Mg", "F")] * 20
    g = torch.Generator().manual_seed(1)
    pred = torch.zeros(40, dtype=torch.float64)
    y = torch.where(torch.arange(40) % 2 == 0, 0.1, 2.0).double() * torch.randn(40, generator=g, dtype=torch.float64)
    cal = build_calibrator({"method": "multigroup", "group_by": "crystal_system,anion"}, "absolute", 0.1)
    fit_calibrator(cal, pred, y, None, structures)
    assert cal.columns == [("anion", 8), ("anion", 9), ("crystal_system", CRYSTAL_SYSTEMS.index("cubic"))]
    q_g = cal.group_thresholds()
    widths = predict_interval(cal, pred[:2], None, None, structures[:2]).size()
    assert widths.tolist() == pytest.approx([2 * max(q_g[0], q_g[2]).item(), 2 * max(q_g[1], q_g[2]).item()])
    again = calibrator_from_dict(json.loads(json.dumps(cal.to_dict())))
    assert torch.equal(predict_interval(again, pred[:2], None, 0.2, structures[:2]).size(),
                       predict_interval(cal, pred[:2], None, 0.2, structures[:2]).size())
    with pytest.raises(ValueError, match="unknown group function"):
        build_calibrator({"method": "multigroup", "group_by": ["anion", "colour"]}, "absolute", 0.1)
