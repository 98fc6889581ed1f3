"""Many-molecule Hamiltonian data: G2 names and lists, the fast H0, a folder of npz files split by molecule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyscf")

from sciml.cli.main import main
from sciml.hamiltonian.data.datamodule import HamiltonianDataModule
from sciml.hamiltonian.data.npz import read_npz_folder

TINY = ["--basis", "sto-3g", "--xc", "pbe", "--conv-tol", "1e-9", "--no-progress"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("organic") / "set"
    for name in ("H2", "CO", "H2O", "HCN", "CH4", "NH3"):
        assert main(["data", "hamiltonian", "--molecule", name, "--n", "3", "--sigma", "0.02", "--sigma-max", "0.05",
                     "--rotate", "--h0", "fast", "--out", str(out), *TINY]) == 0
    return out


def test_folder_reads_every_molecule_with_one_layout(folder):
    structures, layout = read_npz_folder(folder)
    assert sorted({s.meta["molecule"] for s in structures}) == ["CH4", "CO", "H2", "H2O", "HCN", "NH3"]
    assert layout.elements() == [1, 6, 7, 8] and len(structures) == 18
    assert {s.meta["h0"] for s in structures} == {"fast"}


def test_split_by_molecule_keeps_each_molecule_in_one_split(folder, tmp_path):
    dm = HamiltonianDataModule(str(folder), split={"fractions": [0.5, 0.25, 0.25, 0.0], "seed": 3, "by": "molecule"},
                               run_dir=str(tmp_path), limit=12)  # the first 4 molecules (files in name order)
    dm.setup()
    owner = {}
    for name, structures in dm.structures.items():
        for s in structures:
            assert owner.setdefault(s.meta["molecule"], name) == name  # never in two splits
    assert dm.split_sizes() == {"train": 6, "val": 3, "calib": 3, "test": 0}  # 2 / 1 / 1 molecules of 3 conformers
    assert dm.meta["h0"] == "fast"
    assert (tmp_path / "split.json").is_file()


def test_fast_h0_is_close_to_the_full_one_but_not_equal():
    from pyscf import gto

    from sciml.hamiltonian.scf.h0 import zeroth_step_matrices

    mol = gto.M(atom="O 0 0 0.117; H 0 0.757 -0.469; H 0 -0.757 -0.469", basis="def2-svp", verbose=0)
    full, fast = (zeroth_step_matrices(mol, "pbe", 3, m) for m in ("full", "fast"))
    np.testing.assert_allclose(full["S"], fast["S"], atol=1e-14)
    diff = np.abs(full["H0"] - fast["H0"])
    assert 1e-8 < diff.mean() < 2e-5 and diff.max() < 1e-3  # ~µHa: density fitting + grid 1, far below |H - H0|
    with pytest.raises(ValueError, match="unknown H0 method 'cheap'"):
        zeroth_step_matrices(mol, "pbe", 3, "cheap")


def test_fast_h0_blocks_the_xc_grid_without_changing_the_sum():
    """The XC working-memory cap changes only pyscf's grid blocking (one block vs several), not H0."""
    from pyscf import gto

    from sciml.hamiltonian.scf.h0 import fock_solver

    mol = gto.M(atom="C 0 0 0; O 0 0 1.128", basis="def2-svp", verbose=0)
    capped = fock_solver(mol, "pbe", method="fast")
    assert capped.with_df.max_memory == mol.max_memory  # the DF Coulomb keeps pyscf's limit
    assert capped.max_memory < mol.max_memory  # the XC integral gets XC_WORK_MB above what the process holds
    default = fock_solver(mol, "pbe", method="fast")
    default.max_memory = mol.max_memory
    dm = capped.get_init_guess(key="minao")
    np.testing.assert_allclose(capped.get_fock(dm=dm), default.get_fock(dm=dm), rtol=0, atol=1e-12)


def test_bad_folders(folder, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "x.txt").write_text("")
    with pytest.raises(ValueError, match="not a folder of npz files"):
        HamiltonianDataModule(str(folder / "CO.npz"), split={"by": "molecule"}).setup()
    mixed = tmp_path / "mixed"
    assert main(["data", "hamiltonian", "--molecule", "H2", "--n", "1", "--out", str(mixed), *TINY]) == 0
    assert main(["data", "hamiltonian", "--molecule", "CO", "--n", "1", "--h0", "fast", "--out", str(mixed),
                 *TINY]) == 0
    with pytest.raises(ValueError, match="files differ in h0"):
        read_npz_folder(mixed)
    assert main(["data", "hamiltonian", "--molecule", "H2,propane", "--out", str(tmp_path / "p"), *TINY]) == 2
    assert "unknown molecule 'propane'" in capsys.readouterr().err


def test_fit_export_predict_unseen_molecule(folder, tmp_path):
    """Many-molecule run through Lightning, split by molecule; the artifact builds H0 the fast way at prediction,
    keeps the network only if it beats the ridge on val, and gives intervals to a molecule with more occupied
    orbitals than any calibration molecule (deep orbitals borrow the deepest calibrated width, with a note)."""
    import json

    import torch
    import yaml

    from sciml.hamiltonian.artifact import load_model
    from sciml.hamiltonian.data.gen_molecules import builtin_molecule
    from sciml.hamiltonian.predict import molecule_structure, predict_structures
    from sciml.hamiltonian.scf.molecule import zeroth_step

    root = Path(__file__).resolve().parents[2]
    cfg = yaml.safe_load((root / "configs" / "hamiltonian" / "organic.yaml").read_text())
    cfg["run_dir"] = str(tmp_path / "run")
    cfg["data"] |= {"path": str(folder), "split": {"fractions": [0.34, 0.16, 0.34, 0.16], "seed": 0, "by": "molecule"},
                    "batch_size": 4}
    cfg["model"]["network"] |= {"hidden": "8x0e+4x1o+2x1e+2x2e+2x2o", "n_layers": 1, "lmax": 2, "radial_hidden": 16}
    cfg["trainer"] |= {"max_epochs": 1, "enable_progress_bar": False, "enable_model_summary": False,
                       "log_every_n_steps": 1}
    cfg["calibration"]["domain"] = {"beta": 0.25}  # 12 structures: the domain test needs beta >= 1/(n_cal + 1)
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(cfg))
    assert main(["fit", "--config", str(config)]) == 0
    split = json.loads((tmp_path / "run" / "split.json").read_text())
    molecules = {k: {i.split(":")[0] for i in v} for k, v in split.items() if k != "seed"}
    assert all(a.isdisjoint(b) for a in molecules.values() for b in molecules.values() if a is not b)
    artifact = tmp_path / "model"
    assert main(["export", "--ckpt", str(tmp_path / "run" / "checkpoints" / "best.ckpt"), "--output", str(artifact),
                 "--calibrate"]) == 0
    meta = json.loads((artifact / "metadata.json").read_text())
    check = meta["metrics"]["network_check"]
    predictor = load_model(artifact)
    assert predictor.h0 == "fast"
    out_w = torch.cat([predictor.module.net.node_out.weight, predictor.module.net.edge_out.weight])
    assert (check["val_h_mae_network"] < check["val_h_mae_ridge"]) == check["network_used"]
    assert bool((out_w == 0).all()) == (not check["network_used"])
    assert "Network" in (artifact / "README.md").read_text()
    numbers, pos = builtin_molecule("CH3OH")  # 9 occupied orbitals: more than any calibration molecule here
    step = zeroth_step(numbers, pos, "sto-3g", "pbe", predictor.layout, "CH3OH", h0=predictor.h0)
    res = predict_structures([molecule_structure(numbers, pos, step, predictor.layout, "CH3OH")], predictor,
                             alpha=0.5)  # 12 tiny structures: α = 0.1 would give infinite widths
    assert np.isfinite(res[0].lower).all() and "deepest calibration group" in res[0].note
