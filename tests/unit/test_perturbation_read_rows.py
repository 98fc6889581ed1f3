"""``read_h5ad_rows`` reads only the selected cells of X and the layers (sparse or dense), as indexing would."""

from __future__ import annotations

import numpy as np
import pytest

from sciml.perturbation.data.anndata_io import DataError, read_h5ad_rows

ad = pytest.importorskip("anndata")
sp = pytest.importorskip("scipy.sparse")


@pytest.mark.parametrize("sparse", [False, True])
def test_selected_rows_match_in_memory_indexing(tmp_path, sparse):
    rng = np.random.default_rng(0)
    x = (rng.random((40, 7)) < 0.3) * rng.random((40, 7))
    counts = np.round(x * 10)
    labels = np.where(rng.random(40) < 0.4, "ctrl", "A")
    make = sp.csr_matrix if sparse else np.asarray
    adata = ad.AnnData(X=make(x.astype(np.float32)), layers={"counts": make(counts.astype(np.float32))})
    adata.obs["condition"] = labels
    path = tmp_path / "f.h5ad"
    adata.write_h5ad(path)
    got = read_h5ad_rows(path, lambda obs: np.flatnonzero(obs["condition"].to_numpy() == "ctrl"))
    want = adata[labels == "ctrl"]
    as_array = (lambda m: m.toarray()) if sparse else np.asarray
    assert got.n_obs == int((labels == "ctrl").sum()) and list(got.obs_names) == list(want.obs_names)
    np.testing.assert_array_equal(as_array(got.X), as_array(want.X))
    np.testing.assert_array_equal(as_array(got.layers["counts"]), as_array(want.layers["counts"]))
    whole = read_h5ad_rows(path, lambda obs: None)
    assert whole.n_obs == 40


def test_missing_and_unreadable_files_are_one_line_errors(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        read_h5ad_rows(tmp_path / "none.h5ad", lambda obs: None)
    bad = tmp_path / "bad.h5ad"
    bad.write_bytes(b"not hdf5")
    with pytest.raises(DataError, match="not a readable .h5ad"):
        read_h5ad_rows(bad, lambda obs: None)


@pytest.mark.parametrize("sparse", [False, True])
def test_only_the_parts_asked_for_are_read(tmp_path, sparse):
    from sciml.perturbation.data.table import load_table

    rng = np.random.default_rng(1)
    counts = rng.poisson(3.0, (30, 6)).astype(np.float32)
    x = np.log1p(counts / np.maximum(counts.sum(1, keepdims=True), 1) * 1e4).astype(np.float32)
    make = sp.csr_matrix if sparse else np.asarray
    adata = ad.AnnData(X=make(x), layers={"counts": make(counts), "other": make(counts)})
    adata.obs["condition"] = np.where(np.arange(30) < 10, "ctrl", "A+ctrl")
    path = tmp_path / "f.h5ad"
    adata.write_h5ad(path)
    as_array = (lambda m: m.toarray()) if sparse else np.asarray
    only_x = read_h5ad_rows(path, layers=[])
    assert only_x.n_obs == 30 and not list(only_x.layers)
    np.testing.assert_array_equal(as_array(only_x.X), x)
    only_counts = read_h5ad_rows(path, layers=["counts"], x=False)
    assert only_counts.X is None and list(only_counts.layers) == ["counts"]
    with pytest.raises(DataError, match=r"layers has no 'raw' \(layers: \['counts', 'other'\]\)"):
        read_h5ad_rows(path, layers=["raw"], x=False)
    from_x, from_counts = load_table(path), load_table(path, counts_layer="counts")
    np.testing.assert_allclose(as_array(from_x.x), x, rtol=1e-6)
    np.testing.assert_allclose(as_array(from_counts.x), x, rtol=1e-5, atol=1e-6)
