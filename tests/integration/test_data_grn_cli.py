"""``sciml data grn`` end to end: simulate → h5ad → PerturbationDataModule → baselines."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

pytest.importorskip("anndata")

from sciml.cli.main import main  # noqa: E402
from sciml.perturbation.baselines.simple import Additive  # noqa: E402
from sciml.perturbation.data.anndata_io import read_h5ad  # noqa: E402
from sciml.perturbation.data.datamodule import PerturbationDataModule  # noqa: E402

from .conftest import ROOT  # noqa: E402

SMALL = ["--grn.n_genes", "40", "--grn.n_regulators", "14", "--grn.n_singles", "8", "--grn.n_doubles", "10",
         "--grn.cells_per_condition", "30", "--grn.control_cells", "60"]


def test_grn_cli_writes_readable_h5ad(tmp_path, capsys):
    out = tmp_path / "sim.h5ad"
    config = ROOT / "configs" / "data" / "grn_default.yaml"
    assert main(["data", "grn", "--config", str(config), "--output", str(out), "--seed", "3", *SMALL]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["cells"] == 60 + 30 * 18 and summary["doubles"] == 10 and 0 <= summary["fraction_interacting"] <= 1
    adata = read_h5ad(out)
    assert adata.uns["grn"]["config"]["seed"] == 3 and "counts" in adata.layers
    dm = PerturbationDataModule(str(out), counts_layer="counts", split={"kind": "additive"}, knn=5)
    dm.setup()
    test = dm.conditions["test"][0]
    assert Additive().fit(dm).predict_mean(test).shape == (40,)
    np.testing.assert_allclose(dm.cells(test), adata.X[(adata.obs["condition"] == test).to_numpy()], rtol=1e-5)


@pytest.mark.parametrize("name", ["grn_default", "grn_cooperative", "grn_noisy"])
def test_grn_cli_setting_configs_match_dataclass(name):
    from sciml.perturbation.sim.simulate import SimConfig

    cfg = yaml.safe_load((ROOT / "configs" / "data" / f"{name}.yaml").read_text())["grn"]
    SimConfig.from_dict(cfg)


@pytest.mark.parametrize("name", ["grn_cooperative", "grn_noisy"])
def test_grn_cli_runs_each_setting(tmp_path, capsys, name):
    out = tmp_path / "sim.h5ad"
    config = ROOT / "configs" / "data" / f"{name}.yaml"
    assert main(["data", "grn", "--config", str(config), "--output", str(out), *SMALL, "--grn.n_masters", "5"]) == 0
    adata = read_h5ad(out)
    cfg = adata.uns["grn"]["config"]
    assert cfg["hill"] == yaml.safe_load(config.read_text())["grn"].get("hill", 2.0)
    assert set(adata.obs["batch"]) == {f"b{i}" for i in range(cfg["n_batches"])}
    assert (adata.X >= 0).all() and adata.uns["grn"]["interaction"].shape == (10, 40)


@pytest.mark.parametrize(("args", "message"), [
    (["--grn.bogus", "1"], "unknown keys ['bogus']"),
    (["--grn.perturbation", "crispr"], "perturbation 'crispr'"),
    (["--other.x", "1"], "unknown sections ['other']"),
])
def test_grn_cli_bad_config(tmp_path, capsys, args, message):
    assert main(["data", "grn", "--output", str(tmp_path / "x.h5ad"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: grn config") and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "x.h5ad").exists()
