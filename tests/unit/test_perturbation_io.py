import numpy as np
import pytest

pytest.importorskip("anndata")

from sciml.perturbation.data.anndata_io import DataError, read_h5ad, select_hvg, write_h5ad  # noqa: E402
from sciml.perturbation.data.datamodule import PerturbationDataModule  # noqa: E402
from sciml.perturbation.data.table import load_table  # noqa: E402
from sciml.perturbation.sim.toy import toy_adata  # noqa: E402


def write(adata, tmp_path, name="toy.h5ad"):
    return write_h5ad(adata, tmp_path / name)


def test_round_trip_and_no_temp_left(tmp_path):
    adata = toy_adata()
    path = write(adata, tmp_path)
    back = read_h5ad(path)
    np.testing.assert_array_equal(back.X, adata.X)
    assert list(back.obs["condition"]) == list(adata.obs["condition"])
    assert [p.name for p in tmp_path.iterdir()] == ["toy.h5ad"]


def test_missing_file_and_garbage(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        read_h5ad(tmp_path / "nope.h5ad")
    bad = tmp_path / "bad.h5ad"
    bad.write_text("not hdf5")
    with pytest.raises(DataError, match="bad.h5ad.*not a readable"):
        read_h5ad(bad)


def test_missing_condition_column(tmp_path):
    path = write(toy_adata(key="perturbation"), tmp_path)
    with pytest.raises(DataError, match=r"toy.h5ad: obs has no column 'condition'.*condition_key to 'perturbation'"):
        load_table(path, condition_key="condition")


def test_unknown_control_label(tmp_path):
    path = write(toy_adata(control_label="control", key="perturbation"), tmp_path)
    with pytest.raises(DataError, match=r"no control cells labelled 'ctrl'.*data.control_label"):
        load_table(path, condition_key="perturbation", control_label="ctrl")
    table = load_table(path, condition_key="perturbation", control_label="control")
    assert "g00+ctrl" in table.perturbation and table.perturbation["ctrl"] == ()


def test_nan_named(tmp_path):
    adata = toy_adata()
    adata.X[5, 3] = np.nan
    with pytest.raises(DataError, match=r"toy.h5ad: X holds 1 NaN/inf values.*first cell index 5"):
        load_table(write(adata, tmp_path))


def test_inf_in_counts_layer(tmp_path):
    adata = toy_adata()
    adata.layers["counts"] = np.round(np.expm1(adata.X))
    adata.layers["counts"][2, 0] = np.inf
    with pytest.raises(DataError, match=r"layers\['counts'\] holds 1 NaN/inf"):
        load_table(write(adata, tmp_path), counts_layer="counts")


def test_counts_in_x_refused_and_layer_normalised(tmp_path):
    adata = toy_adata()
    counts = np.round(np.expm1(adata.X)).astype(np.float32)
    adata.layers["counts"] = counts.copy()
    adata.X = counts
    path = write(adata, tmp_path)
    with pytest.raises(DataError, match="looks like raw counts.*counts_layer"):
        load_table(path)
    table = load_table(path, counts_layer="counts", target_sum=1e4)
    expected = np.log1p(counts / counts.sum(1, keepdims=True) * 1e4)
    np.testing.assert_allclose(table.x, expected, rtol=1e-5)
    with pytest.raises(DataError, match="layers has no 'raw'"):
        load_table(path, counts_layer="raw")


def test_gene_order_and_missing_genes(tmp_path):
    adata = toy_adata()
    path = write(adata, tmp_path)
    genes = list(adata.var_names)
    assert load_table(path, genes=genes[2:6]).var_names == genes[2:6]
    with pytest.raises(DataError, match="different order.*adata\\[:, genes\\]"):
        load_table(path, genes=[genes[3], genes[1]])
    with pytest.raises(DataError, match="lack 1 of the model's genes \\(GENEX\\)"):
        load_table(path, genes=genes[:3] + ["GENEX"])


def test_unknown_gene_in_datamodule_named(tmp_path):
    dm = PerturbationDataModule(str(write(toy_adata(), tmp_path)), split={"kind": "additive"})
    dm.setup()
    assert dm.encode("g01+g00") == [0, 1]
    with pytest.raises(ValueError, match="NOTAGENE"):
        dm.encode("NOTAGENE+g00")


def test_hvg_keeps_perturbed_genes_in_var_order():
    rng = np.random.default_rng(0)
    x = np.log1p(rng.poisson(rng.uniform(0.5, 20, 40), (200, 40))).astype(np.float32)
    names = [f"g{i:02d}" for i in range(40)]
    chosen = select_hvg(x, names, 10, keep=["g00", "g39"])
    assert {"g00", "g39"} <= set(chosen) and 10 <= len(chosen) <= 12
    assert chosen == sorted(chosen)
    assert select_hvg(x, names, None) == names


def test_read_control_cells_for_prediction(tmp_path):
    from sciml.perturbation.data.table import read_control_cells

    adata = toy_adata(control_label="control", key="perturbation")
    genes = list(adata.var_names)
    path = write(adata, tmp_path)
    ctrl = read_control_cells(path, genes[:5], condition_key="perturbation", control_label="control")
    assert ctrl.shape == (60, 5)
    np.testing.assert_array_equal(ctrl, adata.X[(adata.obs["perturbation"] == "control").to_numpy()][:, :5])
    shuffled = [genes[3], genes[0]]
    with pytest.raises(DataError, match="different order"):
        read_control_cells(path, shuffled, condition_key="perturbation", control_label="control")
    again = read_control_cells(path, shuffled, condition_key="perturbation", control_label="control", reorder=True)
    np.testing.assert_array_equal(again, ctrl[:, [3, 0]])
    with pytest.raises(DataError, match="lack 1 of the model's genes \\(GENEX\\)"):
        read_control_cells(path, ["GENEX"], reorder=True)
    with pytest.raises(DataError, match="no control cells labelled 'ctrl'"):
        read_control_cells(path, genes, condition_key="perturbation")
    assert read_control_cells(path, genes, condition_key="absent").shape == (adata.n_obs, len(genes))


def test_lazy_package_exports():
    import subprocess
    import sys

    code = ("import sys, sciml.perturbation as p; from sciml.perturbation.data.conditions import parse_condition;"
            "assert not {'lightning', 'anndata', 'torch'} & set(sys.modules), sorted(sys.modules);"
            "assert parse_condition('B+A') == ('A', 'B') and 'load_model' in p.__all__")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.filterwarnings("ignore:Variable names are not unique")
def test_subset_cell_types_and_duplicate_genes(tmp_path):
    adata = toy_adata()
    adata.obs["cell_type"] = np.where(np.arange(adata.n_obs) % 2, "a", "b")
    adata.obs.loc[(adata.obs["condition"] == "ctrl").to_numpy() & (adata.obs["cell_type"] == "b").to_numpy(),
                  "cell_type"] = "a"
    path = write(adata, tmp_path)
    with pytest.raises(DataError, match="selects no cells"):
        load_table(path, subset={"cell_type": "zz"})
    with pytest.raises(DataError, match="subset names obs column 'batch'"):
        load_table(path, subset={"batch": "x"})
    with pytest.raises(DataError, match="cell type 'b' has no control cells"):
        load_table(path, cell_type_key="cell_type")
    table = load_table(path, cell_type_key="cell_type", subset={"cell_type": ["a"]})
    assert "ctrl@a" in table.perturbation and all(k.endswith("@a") for k in table.perturbation)
    dup = toy_adata()
    dup.var_names = ["g00"] * 2 + list(dup.var_names[2:])
    with pytest.raises(DataError, match="not unique"):
        load_table(write(dup, tmp_path, "dup.h5ad"))
