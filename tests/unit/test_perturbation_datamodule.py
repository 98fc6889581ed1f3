import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("anndata")

from sciml.perturbation.data.anndata_io import write_h5ad  # noqa: E402
from sciml.perturbation.data.batches import collate  # noqa: E402
from sciml.perturbation.data.datamodule import PerturbationDataModule  # noqa: E402
from sciml.perturbation.data.graph import coexpression_knn, read_edge_list  # noqa: E402
from sciml.perturbation.data.pairing import ot_order  # noqa: E402
from sciml.perturbation.sim.toy import toy_adata  # noqa: E402

DEVEL = Path(__file__).resolve().parents[3] / "shared" / "data" / "cells" / "perturbench_devel.h5ad"


@pytest.fixture(scope="module")
def toy_path(tmp_path_factory):
    return write_h5ad(toy_adata(n_singles=5, cells=10, seed=1), tmp_path_factory.mktemp("cells") / "toy.h5ad")


def make_dm(path, tmp=None, **kw):
    kw = {"cells_per_condition": 16, "conditions_per_batch": 3, "split": {"kind": "additive", "seed": 0},
          "steps_per_epoch": 2, "knn": 4} | kw
    dm = PerturbationDataModule(str(path), run_dir=str(tmp) if tmp else None, **kw)
    dm.setup()
    return dm


def test_batch_contract(toy_path, tmp_path):
    dm = make_dm(toy_path, tmp_path)
    g = len(dm.genes)
    batches = list(dm.train_dataloader())
    assert len(batches) == 2
    b = batches[0]
    assert set(b) == {"x_pert", "x_ctrl", "pert_genes", "condition"}
    assert b["x_pert"].shape == b["x_ctrl"].shape == (3, 16, g)  # 16 > 10 cells: drawn with replacement
    assert b["x_pert"].dtype == b["x_ctrl"].dtype == torch.float32
    assert b["pert_genes"].shape == (3, 2) and b["pert_genes"].dtype == torch.int64
    assert isinstance(b["condition"], list) and len(b["condition"]) == 3
    for cond, row in zip(b["condition"], b["pert_genes"].tolist(), strict=True):
        assert cond in dm.conditions["train"]
        genes = [dm.perturbation_genes[i] for i in row if i >= 0]
        assert tuple(genes) == dm.perturbation(cond) and row.count(-1) == 2 - len(genes)
        x = dm.cells(cond)
        # every drawn perturbed cell is a real cell of that condition
        assert all(np.isclose(x, cell.numpy()).all(1).any() for cell in b["x_pert"][b["condition"].index(cond)])
    ctrl = dm.control_matrix()
    assert all(np.isclose(ctrl, c.numpy()).all(1).any() for c in b["x_ctrl"][0])
    mean, var = dm.control_moments(cond)  # cached per cell type: the same arrays on the next call
    np.testing.assert_allclose(mean, ctrl.mean(0), rtol=1e-6)
    np.testing.assert_allclose(var, ctrl.var(0, ddof=1) / len(ctrl), rtol=1e-5)
    assert dm.control_moments(cond)[0] is mean
    split = json.loads((tmp_path / "split.json").read_text())
    assert split["test"] == dm.conditions["test"] and split["kind"] == "additive"


def test_eval_loaders_fixed_and_cover_split(toy_path):
    dm = make_dm(toy_path)
    for name, loader in (("val", dm.val_dataloader), ("calib", dm.calib_dataloader), ("test", dm.test_dataloader)):
        first, second = list(loader()), list(loader())
        assert [c for b in first for c in b["condition"]] == dm.conditions[name]
        assert all(torch.equal(a["x_pert"], b["x_pert"]) for a, b in zip(first, second, strict=True))


def test_metadata_and_gene_graph(toy_path):
    dm = make_dm(toy_path)
    meta = dm.to_dict()
    json.dumps(meta)
    assert meta["genes"] == dm.genes and meta["control_label"] == "ctrl" and len(meta["data_sha256"]) == 64
    assert set(meta["split_category"]) >= set(dm.conditions["test"])
    e = dm.gene_graph
    assert e.dtype == torch.long and e.shape[0] == 2 and (e[0] != e[1]).all()
    pairs = set(map(tuple, e.T.tolist()))
    assert all((j, i) in pairs for i, j in pairs)


def test_knn_graph_finds_correlated_genes(tmp_path):
    rng = np.random.default_rng(0)
    z = rng.normal(size=(500, 1))
    x = np.concatenate([z, z + 0.01 * rng.normal(size=(500, 1)), rng.normal(size=(500, 3))], axis=1)
    edges = set(map(tuple, coexpression_knn(x, k=1).T.tolist()))
    assert (0, 1) in edges and (1, 0) in edges
    path = tmp_path / "edges.csv"
    path.write_text("source,target\ng00,g01\ng01,UNKNOWN\n")
    assert read_edge_list(path, ["g00", "g01"]).tolist() == [[0, 1], [1, 0]]
    with pytest.raises(ValueError, match="no edge joins"):
        read_edge_list(path, ["a", "b"])


def test_ot_pairing_minimises_cost():
    rng = np.random.default_rng(0)
    pert = rng.normal(size=(8, 3))
    ctrl = pert[rng.permutation(8)] + 0.01
    p = ot_order(ctrl, pert)
    np.testing.assert_allclose(ctrl[p], pert + 0.01)


def test_ot_pairing_in_batches(toy_path):
    dm = make_dm(toy_path, pairing="ot")
    b = next(iter(dm.train_dataloader()))
    assert b["x_ctrl"].shape == b["x_pert"].shape
    with pytest.raises(ValueError, match="pairing"):
        PerturbationDataModule(str(toy_path), pairing="nearest")


def test_collate_single_item():
    item = {"x_pert": np.zeros((2, 3)), "x_ctrl": np.ones((2, 3)), "pert_genes": [1, -1], "condition": "a+ctrl"}
    b = collate([item])
    assert b["x_pert"].shape == (1, 2, 3) and b["pert_genes"].tolist() == [[1, -1]]


def test_from_config_rejects_unknown_keys(toy_path):
    with pytest.raises(ValueError, match="unknown keys \\['bogus'\\]"):
        PerturbationDataModule.from_config({"path": str(toy_path), "bogus": 1})


@pytest.mark.skipif(not DEVEL.is_file(), reason="../shared/data/cells/perturbench_devel.h5ad absent")
def test_perturbench_devel_norman():
    dm = PerturbationDataModule(str(DEVEL), condition_key="perturbation", control_label="control",
                                subset={"dataset": "norman19"}, n_hvg=200, cells_per_condition=8,
                                conditions_per_batch=2, split={"kind": "additive", "holdout": 1.0}, knn=10)
    dm.setup()
    assert dm.control_matrix().shape == (100, len(dm.genes)) and 200 <= len(dm.genes) <= 201
    assert dm.perturbation_genes[: len(dm.genes)] == dm.genes
    assert all(dm.split_category[c] == "double_seen2" for c in dm.conditions["test"])
    b = next(iter(dm.train_dataloader()))
    assert b["x_pert"].shape == (2, 8, len(dm.genes))
    assert (b["pert_genes"] < len(dm.perturbation_genes)).all()


@pytest.mark.skipif(not DEVEL.is_file(), reason="../shared/data/cells/perturbench_devel.h5ad absent")
def test_perturbench_devel_by_cell_type():
    dm = PerturbationDataModule(str(DEVEL), control_label="control", cell_type_key="cell_type",
                                subset={"dataset": "mcfaline23"}, cells_per_condition=4, conditions_per_batch=2,
                                split={"kind": "by_cell_type", "holdout_cell_type": "A172"}, knn=5)
    dm.setup()
    held = [c for n in ("val", "calib", "test") for c in dm.conditions[n]]
    assert held and all(c.endswith("@A172") for c in held)
    c = dm.conditions["test"][0]
    assert dm.control_matrix(c).shape == (100, len(dm.genes)) and dm.control_matrix().shape[0] == 300
    b = next(iter(dm.test_dataloader()))
    assert b["condition"] == dm.conditions["test"][:2]


def test_knn_graph_ranked_in_blocks_of_genes_is_the_whole_matrix_graph(monkeypatch):
    from sciml.perturbation.data import graph

    rng = np.random.default_rng(0)
    x = ((rng.random((200, 90)) < 0.3) * rng.random((200, 90))).astype(np.float32)
    x[:, 7] = 0.0  # a constant gene correlates with nothing
    whole = graph.coexpression_knn(x, k=6)
    monkeypatch.setattr(graph, "RANK_VALUES", 3 * 90)  # three genes' rows at a time
    assert torch.equal(graph.coexpression_knn(x, k=6), whole)
