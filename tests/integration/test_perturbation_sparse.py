"""Sparse input end to end: a CSR screen is read sparse, densified a condition or a batch at a time, never whole,
and gives what the dense file gives: the same cells, controls, gene graph, batches, a fitted model and predictions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from sciml.cli.main import main

ad = pytest.importorskip("anndata")
sparse = pytest.importorskip("scipy.sparse")

ROOT = Path(__file__).resolve().parents[2]
SIM = dict(seed=3, n_genes=20, n_masters=4, n_regulators=8, n_singles=6, n_doubles=8, cells_per_condition=40,
           control_cells=120)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The same tiny screen written dense and sparse (X and layers['counts'] as CSR)."""
    from sciml.perturbation.data.anndata_io import write_h5ad
    from sciml.perturbation.sim.simulate import simulate

    tmp = tmp_path_factory.mktemp("sparse")
    adata = simulate(SIM)
    dense_path = write_h5ad(adata, tmp / "dense.h5ad")
    csr = adata.copy()
    csr.X = sparse.csr_matrix(np.asarray(adata.X, np.float32))
    csr.layers["counts"] = sparse.csr_matrix(np.asarray(adata.layers["counts"]))
    return tmp, dense_path, write_h5ad(csr, tmp / "sparse.h5ad")


def _dm(path, **kw):
    from sciml.perturbation.data.datamodule import PerturbationDataModule

    dm = PerturbationDataModule(str(path), cells_per_condition=8, conditions_per_batch=2, steps_per_epoch=2, knn=4,
                                split={"kind": "combo_seen2", "seed": 0}, **kw)
    dm.setup()
    return dm


@pytest.mark.parametrize("layer", [None, "counts"])
def test_sparse_file_stays_sparse_and_reads_like_the_dense_one(files, layer, monkeypatch):
    from sciml.perturbation.data import anndata_io, graph

    _, dense_path, sparse_path = files
    a = _dm(dense_path, counts_layer=layer)
    shapes = []
    real_dense = anndata_io.dense
    monkeypatch.setattr(anndata_io, "dense", lambda m: shapes.append(m.shape) or real_dense(m))
    monkeypatch.setattr(graph, "CHUNK_VALUES", 64 * 20)  # the gene graph read 64 cells at a time
    b = _dm(sparse_path, counts_layer=layer)
    assert sparse.issparse(b.table.x) and not sparse.issparse(a.table.x)
    assert a.genes == b.genes and a.conditions == b.conditions
    torch.testing.assert_close(a.gene_graph, b.gene_graph)
    np.testing.assert_allclose(b.control_matrix(), a.control_matrix(), rtol=1e-6, atol=1e-6)
    for key in a.conditions["train"][:3] + a.conditions["test"]:
        np.testing.assert_allclose(b.cells(key), a.cells(key), rtol=1e-6, atol=1e-6)
    torch.manual_seed(0)
    batch_a = next(iter(a.train_dataloader()))
    torch.manual_seed(0)
    batch_b = next(iter(b.train_dataloader()))
    assert batch_a["condition"] == batch_b["condition"]
    torch.testing.assert_close(batch_a["x_pert"], batch_b["x_pert"], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(batch_a["x_ctrl"], batch_b["x_ctrl"], rtol=1e-6, atol=1e-6)
    from sciml.perturbation.screen import read_screen

    read_screen(b)  # the prior's inputs: one condition dense at a time
    # never the whole matrix at once: at most a cell type's controls, a condition, a chunk, a batch, or the 200
    # cells the raw-counts check looks at
    largest = max(len(b.control_matrix()), *(len(v) for v in b.table.index.values()), 64, 200)
    assert shapes and max(s[0] for s in shapes) <= largest < b.table.n_cells


def test_control_cap_draws_a_seeded_subset(files):
    _, _, sparse_path = files
    full, capped = _dm(sparse_path), _dm(sparse_path, max_control_cells=50)
    ctrl, sub = full.control_matrix(), capped.control_matrix()
    assert len(ctrl) == 120 and len(sub) == 50
    assert all(np.isclose(ctrl, row).all(1).any() for row in sub)  # a subset of the control cells
    np.testing.assert_array_equal(sub, _dm(sparse_path, max_control_cells=50).control_matrix())  # seeded
    assert capped.conditions == full.conditions


def test_fit_and_predict_from_sparse_files(files, capsys):
    """``sciml fit`` on the CSR screen (with a control cap), then predict from a CSR control file with a cap."""
    tmp, _, sparse_path = files
    cfg = yaml.safe_load((ROOT / "configs" / "perturbation" / "grn_default.yaml").read_text())
    cfg["run_dir"] = str(tmp / "run")
    cfg["data"] |= {"path": str(sparse_path), "cells_per_condition": 8, "conditions_per_batch": 2,
                    "steps_per_epoch": 2, "knn": 5, "max_control_cells": 100}
    cfg["model"]["network"] |= {"dim": 16, "depth": 1, "heads": 2}
    cfg["model"]["flow"] |= {"steps": 2, "method": "euler", "val_steps": 1}
    cfg["trainer"] |= {"max_epochs": 1, "enable_model_summary": False, "log_every_n_steps": 1}
    (tmp / "tiny.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["fit", "--config", str(tmp / "tiny.yaml")]) == 0
    model = tmp / "model"
    assert main(["export", "--ckpt", str(tmp / "run" / "checkpoints" / "best.ckpt"), "--output", str(model)]) == 0
    full = ad.read_h5ad(sparse_path)
    ctrl = full[full.obs["condition"] == "ctrl"].copy()
    assert sparse.issparse(ctrl.X)
    ctrl.write_h5ad(tmp / "ctrl_sparse.h5ad")
    out = tmp / "pred.h5ad"
    capsys.readouterr()
    assert main(["perturbation", "predict", "--model", str(model), "--control", str(tmp / "ctrl_sparse.h5ad"),
                 "--perturbations", "G000+G001,G002", "--n-cells", "10", "--max-control-cells", "30",
                 "--output", str(out)]) == 0
    pred = ad.read_h5ad(out)
    assert pred.obs["condition"].value_counts().to_dict() == {"ctrl": 30, "G000+G001": 10, "G002+ctrl": 10}
    assert np.isfinite(np.asarray(pred.X)).all() and (np.asarray(pred.X) >= 0).all()
    assert pred.layers["counts"].shape == pred.shape
