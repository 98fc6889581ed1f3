"""The additive fallback is exact: a fallen-back flow model's generated mean is the additive baseline's prediction.

Where the model does not beat additive on val, the exported model predicts with the additive prior. The generated
cells are the network's, moved to the nearest non-negative population with the baseline's mean, so the mean profile
matches that baseline to float precision (not only to the sampling error ``sd/√n`` of ``n`` generated cells, which
is what a shift of the drawn control cells alone would give).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("anndata")

from sciml.perturbation.baselines.simple import Additive  # noqa: E402
from sciml.perturbation.data.anndata_io import write_h5ad  # noqa: E402
from sciml.perturbation.data.datamodule import PerturbationDataModule  # noqa: E402
from sciml.perturbation.evaluate import split_predictions  # noqa: E402
from sciml.perturbation.module import PerturbationFlow  # noqa: E402
from sciml.perturbation.nn import project_mean  # noqa: E402
from sciml.perturbation.screen import read_screen, single_effects  # noqa: E402
from sciml.perturbation.select import apply_fallback  # noqa: E402
from sciml.perturbation.sim.toy import toy_adata  # noqa: E402

N_CELLS = 64


def _bisection(col: np.ndarray, target: float) -> np.ndarray:
    lo, hi = col.min() - target - 1.0, col.max() + 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if np.maximum(col - mid, 0).mean() > target else (lo, mid)
    return np.maximum(col - hi, 0)


@pytest.mark.parametrize("seed", range(5))
def test_projection_is_the_nearest_nonnegative_population_with_the_mean(seed):
    gen = torch.Generator().manual_seed(seed)
    cells = torch.randn(2, 40, 6, generator=gen, dtype=torch.float64)
    mean = torch.randn(2, 6, generator=gen, dtype=torch.float64)
    out = project_mean(cells, mean)
    assert (out >= 0).all()
    torch.testing.assert_close(out.mean(1), mean.clamp_min(0), atol=1e-12, rtol=0)
    for c in range(2):
        for g in range(6):
            ref = _bisection(cells[c, :, g].numpy(), float(mean[c, g].clamp_min(0)))
            np.testing.assert_allclose(out[c, :, g].numpy(), ref, atol=1e-9)
    feasible = cells.abs()  # already non-negative with its own mean: unchanged
    torch.testing.assert_close(project_mean(feasible, feasible.mean(1)), feasible)
    shifted = project_mean(cells, mean, nonnegative=False)
    torch.testing.assert_close(shifted - shifted.mean(1, keepdim=True), cells - cells.mean(1, keepdim=True))
    torch.testing.assert_close(shifted.mean(1), mean)


def _cell_types(n: int = 3):
    """Three cell types with different effects of the same genes (toys of different seeds), one screen."""
    import anndata as ad

    parts = []
    for t in range(n):
        part = toy_adata(n_genes=10, n_singles=4, doubles=[], cells=60, control_cells=200, noise=0.5, seed=10 + t)
        part.obs["cell_type"] = f"line{t}"
        part.obs_names = [f"t{t}_{c}" for c in part.obs_names]
        parts.append(part)
    return ad.concat(parts)


@pytest.fixture(scope="module", params=["additive", "unseen_single", "by_cell_type"])
def dm(request, tmp_path_factory):
    """Zero-inflated screen (many log1p zeros, some additive sums below zero) so the clip and projection matter.

    ``by_cell_type``: one of three cell types held out (cell-line transfer): each gene's effect there is the mean
    of its effects in the two training cell types, for the baseline and the fallen-back model alike.
    """
    kind = request.param
    adata = _cell_types() if kind == "by_cell_type" else toy_adata(n_genes=10, n_singles=6, cells=60,
                                                                    control_cells=300, noise=0.5, seed=4)
    adata.X = np.maximum(adata.X - 5.0, 0.0).astype(np.float32)
    path = write_h5ad(adata, tmp_path_factory.mktemp("fb") / "toy.h5ad")
    dm = PerturbationDataModule(str(path), split={"kind": kind, "seed": 1, "holdout": 0.5}, knn=4,
                                cell_type_key="cell_type" if kind == "by_cell_type" else None)
    dm.setup()
    return dm


def _fallen_back(dm) -> PerturbationFlow:
    torch.manual_seed(0)
    screen = read_screen(dm)
    m = PerturbationFlow({"dim": 16, "depth": 1, "heads": 2}, list(dm.perturbation_genes), n_measured=len(dm.genes),
                         perturbed_genes=screen.perturbed_genes, flow={"steps": 3, "method": "euler"})
    m.net.set_graph(dm.gene_graph)
    m.set_single_effects(single_effects(dm))
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():  # a network that moves cells (the zero-initialised head would not)
        for p in m.net.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen))
    assert apply_fallback(m, {"beats_additive": False}, dm) is True
    return m.eval()


def test_fallen_back_model_generates_the_additive_baselines_mean(dm):
    m = _fallen_back(dm)
    additive = Additive().fit(dm)
    cells = split_predictions(m, dm, "test", N_CELLS, seed=0)
    unknown = [k for k in cells if not all(bool(m.has_effect[i]) for i in dm.encode(k) if i >= 0)]
    if dm.split["kind"] == "unseen_single":
        assert unknown  # the stand-in of a single never measured in training is exercised
    if dm.split["kind"] == "by_cell_type":  # every test gene was measured, in other cell types only
        assert not unknown and all(additive.train_delta.get(k) is None for k in cells)
    sd = max(float(x.std(0).max()) for x in cells.values())
    for key, x in cells.items():
        assert (x >= 0).all()
        expected = np.maximum(additive.predict_mean(key), 0.0)
        # exact to float32 rounding, far inside the sampling error sd/sqrt(n) a shifted draw would carry
        np.testing.assert_allclose(x.mean(0), expected, atol=2e-5, rtol=0)
        assert 2e-5 < 0.1 * sd / np.sqrt(N_CELLS)
    assert any(float(x.std(0).max()) > 0.05 for x in cells.values())  # cells keep a distribution, not a point


def test_without_the_projection_the_mean_drifts_from_additive(dm):
    """Clamp-only sampling from the drawn controls, without the projection, is off by more than float error."""
    m = _fallen_back(dm)
    additive = Additive().fit(dm)
    key = dm.conditions["test"][0]
    ctrl = torch.as_tensor(dm.control_matrix(key)[:N_CELLS], dtype=torch.float32)[None]
    pert = torch.as_tensor([dm.encode(key)])
    m.set_prior(additive_fallback=False, remainder_mean=0.0)  # mean removed from the network, prior additive, clamp
    drifted = m.sample(ctrl, pert).mean(1)[0].numpy()
    assert np.abs(drifted - np.maximum(additive.predict_mean(key), 0)).max() > 1e-3


def test_old_states_without_the_stand_in_load_with_the_mean_single(dm):
    m = _fallen_back(dm)
    state = {k: v for k, v in m.state_dict().items() if k != "unknown_effect"}
    fresh = PerturbationFlow(**m.hparams)
    fresh.load_state_dict(state, strict=True)
    torch.testing.assert_close(fresh.unknown_effect, m.single_effect[m.rows[m.has_effect]].mean(0))


def test_a_gene_measured_in_several_cell_types_counts_with_its_mean_effect(tmp_path):
    """Additive baseline and the model's single-effect table agree: the mean over the cell types it was measured in."""
    path = write_h5ad(_cell_types(), tmp_path / "lines.h5ad")
    dm = PerturbationDataModule(str(path), split={"kind": "by_cell_type", "seed": 0, "holdout_cell_type": "line2"},
                                knn=4, cell_type_key="cell_type")
    dm.setup()
    additive = Additive().fit(dm)
    table = single_effects(dm)
    for gene in ("g00", "g03"):
        per_line = [additive.train_delta[k] for k in additive.train_delta if dm.perturbation(k) == (gene,)]
        assert len(per_line) == 2 and np.abs(per_line[0] - per_line[1]).max() > 0.1  # the lines differ
        np.testing.assert_allclose(additive.gene_delta[gene], np.mean(per_line, axis=0), rtol=1e-6)
        np.testing.assert_allclose(table[dm.perturbation_genes.index(gene)].numpy(), additive.gene_delta[gene],
                                   rtol=1e-5, atol=1e-6)
        key = next(k for k in dm.conditions["train"] if dm.perturbation(k) == (gene,))
        np.testing.assert_array_equal(additive._single(gene, "line0" if "line0" in key else "line1"),
                                      additive.train_delta[key])  # its own cell type keeps its own effect


def test_beating_additive_needs_enough_val_conditions(tmp_path, monkeypatch):
    """A perfect predictor beats additive on val only when val holds at least ``min_val`` conditions."""
    import sciml.perturbation.evaluate as evaluate
    from sciml.perturbation.select import MIN_VAL_CONDITIONS, versus_additive

    adata = toy_adata(n_genes=8, n_singles=5, cells=40, control_cells=100, interaction=0.8, seed=2)
    dm = PerturbationDataModule(str(write_h5ad(adata, tmp_path / "toy.h5ad")),
                                split={"kind": "additive", "seed": 0, "holdout": 0.6}, knn=4)
    dm.setup()
    n_val = len(dm.conditions["val"])
    assert n_val >= 1
    monkeypatch.setattr(evaluate, "split_predictions", lambda m, dm, split, *a, **k: {
        key: dm.cells(key) for key in dm.conditions[split]})
    enough = versus_additive(None, dm, min_val=n_val)
    assert enough["flow_mse"] < 1e-10 < enough["additive_mse"] and enough["beats_additive"]
    too_few = versus_additive(None, dm, min_val=n_val + 1)
    assert too_few["flow_mse"] == enough["flow_mse"] and not too_few["beats_additive"]
    assert versus_additive(None, dm)["min_val"] == MIN_VAL_CONDITIONS == 3
