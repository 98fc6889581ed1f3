"""The written prediction: control cells, condition labels, and counts consistent with the log1p cells."""

from __future__ import annotations

import numpy as np
import pytest

from sciml.perturbation.counts import library_scales, sample_counts
from sciml.perturbation.data.table import ControlCells, read_controls
from sciml.perturbation.write import to_anndata

ad = pytest.importorskip("anndata")
T = 1e4  # target sum


def _controls(n=300, g=40, seed=0) -> ControlCells:
    """Control cells with raw counts whose library sizes span 2,000-20,000, X = log1p(c / L · T) over the genes."""
    rng = np.random.default_rng(seed)
    profile = rng.gamma(0.6, 1.0, g)
    profile /= profile.sum()
    library = rng.integers(2_000, 20_000, n)
    counts = rng.poisson(library[:, None] * profile)
    x = np.log1p(counts / counts.sum(1, keepdims=True) * T).astype(np.float32)
    return ControlCells(x=x, counts=counts, counts_layer="counts")


def _result(cells: np.ndarray, conditions: list[str]) -> dict:
    c, _, g = cells.shape
    zero = np.zeros((c, g), np.float32)
    return {"cells": cells, "conditions": conditions, "notes": [""] * c, "effect": zero, "lower": zero - 1,
            "upper": zero + 1, "alpha": 0.2, "threshold": 1.0}


def _generated(controls: ControlCells, n=200, seed=1) -> np.ndarray:
    """Two conditions: control-like cells, and the same with the first 10 genes knocked down 4-fold."""
    rng = np.random.default_rng(seed)
    base = controls.x[rng.integers(len(controls.x), size=(2, n))]
    base[1, :, :10] = np.log1p(np.expm1(base[1, :, :10]) / 4)
    return base


def test_scales_are_counts_per_normalised_unit():
    controls = _controls()
    k = library_scales(controls.x, controls.counts)
    np.testing.assert_allclose(k * T, controls.counts.sum(1), rtol=1e-4)  # X sums to T over these genes: k = L / T
    np.testing.assert_array_equal(library_scales(controls.x), np.ones(len(controls.x)))


def test_normalised_counts_track_x_on_average():
    """E[c / k] = expm1(x) per cell and gene, so each condition's mean normalised counts match its mean expm1(X).

    With ``c ~ Poisson(expm1(x)·k)``, ``D = mean_i(c_i/k_i) − mean_i(expm1(x_i))`` has mean 0 and variance
    ``Σ_i expm1(x_i)/k_i / n²``: every z-score of 80 (condition, gene) pairs is within 5 (a two-sided normal
    5σ event has probability 6e-7), their mean within 5/√80, and on the log1p scale the delta method gives
    ``|log1p(mean c/k) − log1p(mean expm1 x)| ≤ 5·sd/(1 + mean expm1 x)``.
    """
    controls = _controls()
    cells = _generated(controls)
    x = cells.reshape(-1, cells.shape[2])
    counts, k = sample_counts(x, library_scales(controls.x, controls.counts), np.random.default_rng(0))
    counts = counts.toarray().reshape(cells.shape)
    k = k.reshape(2, -1)
    lam = np.expm1(cells.astype(np.float64))
    n = cells.shape[1]
    mean_y, mean_lam = (counts / k[..., None]).mean(1), lam.mean(1)
    sd = np.sqrt((lam / k[..., None]).sum(1)) / n
    z = (mean_y - mean_lam) / sd
    assert np.abs(z).max() < 5 and abs(z.mean()) < 5 / np.sqrt(z.size)
    assert (np.abs(np.log1p(mean_y) - np.log1p(mean_lam)) <= 5 * sd / (1 + mean_lam)).all()


def test_written_file_has_controls_labels_and_integer_counts():
    controls = _controls()
    cells = _generated(controls)
    a = to_anndata(_result(cells, ["A+ctrl", "A+B"]), [f"g{i}" for i in range(40)], {}, controls,
                   condition_key="perturbation", control_label="control", given=["A", "A+B"], seed=3)
    n_gen = cells.shape[0] * cells.shape[1]
    assert a.shape == (n_gen + 300, 40)
    assert a.obs["condition"].value_counts().to_dict() == {"ctrl": 300, "A+ctrl": 200, "A+B": 200}
    assert a.obs["perturbation"].value_counts().to_dict() == {"control": 300, "A": 200, "A+B": 200}
    np.testing.assert_array_equal(a.X[:n_gen], cells.reshape(n_gen, -1))
    np.testing.assert_array_equal(a.X[n_gen:], controls.x)
    counts = a.layers["counts"]
    assert counts.dtype == np.int32 and counts.min() >= 0
    np.testing.assert_array_equal(counts[n_gen:].toarray(), controls.counts)  # the controls' own counts
    meta = a.uns["perturbation_predict"]
    assert (meta["condition_key"], meta["control_label"], meta["n_control_cells_written"]) == ("perturbation",
                                                                                               "control", 300)
    # same seed, same counts; controls left out: the generated cells' rows unchanged
    b = to_anndata(_result(cells, ["A+ctrl", "A+B"]), [f"g{i}" for i in range(40)], {}, controls,
                   include_controls=False, seed=3)
    assert b.n_obs == n_gen and set(b.obs["condition"]) == {"A+ctrl", "A+B"} and list(b.obs.columns) == ["condition"]
    np.testing.assert_array_equal(b.layers["counts"].toarray(), counts[:n_gen].toarray())


def test_generated_library_sizes_follow_the_controls():
    """A control-like cell's total is Poisson with mean k·Σexpm1(x) = its borrowed control's library size."""
    controls = _controls()
    cells = _generated(controls)[:1]
    x = cells[0]
    counts, k = sample_counts(x, library_scales(controls.x, controls.counts), np.random.default_rng(5))
    total, expected = np.asarray(counts.sum(1)).ravel(), k * np.expm1(x.astype(np.float64)).sum(1)
    assert (np.abs(total - expected) < 5 * np.sqrt(expected)).all()
    library = controls.counts.sum(1)
    assert np.isin(np.round(k * T).astype(int), library).all()  # each borrowed a control's library size
    q = np.quantile(total, [0.1, 0.5, 0.9]) / np.quantile(library, [0.1, 0.5, 0.9])
    assert (np.abs(q - 1) < 0.15).all()


def test_control_counts_layer_is_read_when_it_holds_counts(tmp_path):
    controls = _controls(n=20, g=6)
    obs = {"perturbation": ["control"] * 20}
    genes = [f"g{i}" for i in range(6)]
    a = ad.AnnData(X=controls.x, obs=obs, var={"gene": genes}, layers={"counts": controls.counts.astype(np.float32)})
    a.var_names = genes
    a.write_h5ad(tmp_path / "c.h5ad")
    read = read_controls(tmp_path / "c.h5ad", genes, "perturbation", "control")
    assert read.counts_layer == "counts" and np.array_equal(read.counts, controls.counts)
    a.layers["counts"] = a.layers["counts"] + 0.5  # not counts: not used, the log1p X still read
    a.write_h5ad(tmp_path / "d.h5ad")
    read = read_controls(tmp_path / "d.h5ad", genes, "perturbation", "control")
    assert read.counts is None and read.counts_layer is None
    np.testing.assert_array_equal(read.x, controls.x)


def test_counts_do_not_depend_on_the_threads_and_zero_cells_draw_nothing(monkeypatch):
    import sciml.perturbation.counts as counts_module

    monkeypatch.setattr(counts_module, "ROWS_PER_DRAW", 64)  # several blocks
    controls = _controls()
    x = _generated(controls).reshape(-1, controls.x.shape[1])
    x[5] = 0.0
    scales = library_scales(controls.x, controls.counts)
    one, k1 = sample_counts(x, scales, np.random.default_rng(4), workers=1)
    two, k2 = sample_counts(x, scales, np.random.default_rng(4), workers=2)
    assert one.has_canonical_format and one.dtype == np.int32 and one.shape == x.shape
    assert (one != two).nnz == 0 and np.array_equal(k1, k2)
    assert one[5].nnz == 0 and ((one.toarray() > 0) <= (x > 0)).all()  # a zero rate draws no count
