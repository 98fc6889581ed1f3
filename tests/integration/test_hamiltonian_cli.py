"""End to end: ``sciml fit`` (water config, tiny) → ``sciml export --calibrate`` → ``sciml hamiltonian predict``.

Reads ``../shared/data/hamiltonian/water_pbe_def2svp.npz`` (skips when absent); prediction needs pyscf
(``importorskip``). Bad inputs (unknown element, other basis, missing overlap, unreadable xyz, wrong model
kind) are one-line errors.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from sciml.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "hamiltonian" / "water_pbe_def2svp.npz"
SHIPPED = ROOT / "checkpoints" / "water-pbe-def2svp"


def write_xyz(path: Path, symbols, pos) -> Path:
    path.write_text(f"{len(symbols)}\ntest\n" + "".join(f"{s} {x:.10f} {y:.10f} {z:.10f}\n"
                                                         for s, (x, y, z) in zip(symbols, pos, strict=True)))
    return path


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    if not DATA.is_file():
        pytest.skip(f"shared data {DATA} absent")
    tmp = tmp_path_factory.mktemp("ham")
    cfg = yaml.safe_load((ROOT / "configs" / "hamiltonian" / "water.yaml").read_text())
    cfg["run_dir"] = str(tmp / "run")
    cfg["data"] |= {"path": str(DATA), "limit": 40, "batch_size": 8}
    cfg["model"]["network"] |= {"hidden": "8x0e+4x1o+2x1e+2x2e+2x2o", "n_layers": 1, "lmax": 2, "radial_hidden": 16}
    cfg["trainer"] |= {"max_epochs": 1, "enable_progress_bar": False, "enable_model_summary": False,
                       "log_every_n_steps": 1}
    config = tmp / "tiny.yaml"
    config.write_text(yaml.safe_dump(cfg))
    assert main(["fit", "--config", str(config)]) == 0
    artifact = tmp / "model"
    ckpt = tmp / "run" / "checkpoints" / "best.ckpt"
    assert main(["export", "--ckpt", str(ckpt), "--output", str(artifact), "--calibrate"]) == 0
    data = np.load(DATA)
    return {"tmp": tmp, "artifact": artifact, "pos": data["positions_angstrom"][-1], "h": data["hamiltonian"][-1]}


def test_run_folder_and_artifact(tiny_run):
    run = tiny_run["tmp"] / "run"
    split = json.loads((run / "split.json").read_text())
    assert sum(len(split[k]) for k in ("train", "val", "calib", "test")) == 40
    meta = json.loads((tiny_run["artifact"] / "metadata.json").read_text())
    assert meta["task"] == "hamiltonian" and meta["basis"] == "def2-svp" and meta["elements"] == [1, 8]
    for key in ("h_mae_microhartree", "gauge_mae_microhartree", "test_coverage", "occupied_cosine_percent"):
        assert np.isfinite(meta["metrics"][key])
    assert json.loads((tiny_run["artifact"] / "calibrator.json").read_text())["method"]
    # the chemical domain of the train split: recorded, stated in the card, loaded with the model
    assert meta["training_domain"] == {"elements": [1, 8], "n_molecules": 1, "n_structures": len(split["train"]),
                                       "n_atoms": [3, 3], "n_heavy_atoms": [1, 1]}
    card = (tiny_run["artifact"] / "README.md").read_text()
    assert "## Chemical domain\n- Elements: H, O" in card and "- Sizes: 3 atoms, 1 heavy (non-H) atoms" in card


def test_predict_writes_matrices_levels_and_plot(tiny_run, tmp_path, capsys):
    pytest.importorskip("pyscf")
    xyz = write_xyz(tmp_path / "water.xyz", "OHH", tiny_run["pos"])
    ref = tmp_path / "ref.npy"
    np.save(ref, tiny_run["h"])
    out = tmp_path / "out"
    assert main(["hamiltonian", "predict", "--model", str(tiny_run["artifact"]), str(xyz), "--output", str(out),
                 "--reference", str(ref), "--plot"]) == 0
    folder = out / "water"
    h, s = np.load(folder / "hamiltonian.npy"), np.load(folder / "overlap.npy")
    assert h.shape == s.shape == (24, 24) and np.allclose(h, h.T, atol=1e-12)
    assert np.all(np.linalg.eigvalsh(s) > 0)
    row = json.loads((folder / "eigenvalues.json").read_text())
    assert row["n_occupied"] == 5 and len(row["orbital_energies_ev"]) == 8
    assert row["lower_ev"][0] <= row["orbital_energies_ev"][0] <= row["upper_ev"][0]
    assert row["gap_lower_ev"] <= row["gap_ev"] <= row["gap_upper_ev"]
    assert (folder / "levels.png").stat().st_size > 0
    for name in ("hamiltonians.h5", "overlaps.h5", "element.dat", "orbital_types.dat", "info.json"):
        assert (folder / "deeph" / name).is_file()
    from sciml.hamiltonian.data.deeph import read_deeph

    structure, layout = read_deeph(folder / "deeph")
    assert np.allclose(structure.to_dense("H", layout, order="pyscf"), h, atol=1e-12)
    assert "gap" in capsys.readouterr().out


def test_bad_inputs_are_one_line_errors(tiny_run, tmp_path, capsys):
    pytest.importorskip("pyscf")
    model = str(tiny_run["artifact"])
    nh3 = write_xyz(tmp_path / "nh3.xyz", "NHHH",
                    [[0, 0, 0], [0, 0.94, 0.38], [0.81, -0.47, 0.38], [-0.81, -0.47, 0.38]])
    bad = tmp_path / "bad.xyz"
    bad.write_text("three\nnot a number\nO 0 0\n")
    cases = {str(nh3): "outside the trained orbital basis", str(bad): "not a readable xyz",
             str(tmp_path / "missing.xyz"): "no such file"}
    for path, message in cases.items():
        assert main(["hamiltonian", "predict", "--model", model, path, "--output", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and message in err and len(err.splitlines()) == 1, err
    assert main(["hamiltonian", "predict", "--model", str(tmp_path), str(nh3), "--output", str(tmp_path / "o")]) == 2
    assert "not a sciml model folder" in capsys.readouterr().err


def test_other_basis_is_an_error(tiny_run):
    pytest.importorskip("pyscf")
    from sciml.hamiltonian.artifact import load_model
    from sciml.hamiltonian.scf.molecule import zeroth_step

    predictor = load_model(tiny_run["artifact"])
    numbers = np.array([8, 1, 1])
    with pytest.raises(ValueError, match="water.xyz: basis 'sto-3g' gives shells .* trained with"):
        zeroth_step(numbers, tiny_run["pos"], "sto-3g", "pbe", predictor.layout, "water.xyz")


def test_calibrate_adds_the_residual_bound_and_refits_the_domain_test(tiny_run, tmp_path, capsys):
    """``sciml hamiltonian calibrate``: ``residual`` into a copy (the source untouched), then ``domain`` in place;
    weights and the residual bound survive the domain refit."""
    pytest.importorskip("pyscf")
    from sciml.hamiltonian.artifact import load_model

    model, out = tiny_run["artifact"], tmp_path / "calibrated"
    weights = (model / "weights.safetensors").read_bytes()
    assert main(["hamiltonian", "calibrate", "--model", str(model), "--operation", "residual", "--output",
                 str(out)]) == 0
    assert (out / "residual.json").is_file() and not (model / "residual.json").exists()
    assert "wrote residual.json" in capsys.readouterr().out
    assert main(["calibrate", "--model", str(out), "--operation", "domain", "--score", "absolute"]) == 0
    predictor = load_model(out)
    assert predictor.residual is not None and predictor.domain is not None
    assert predictor.calibrator.score_name == "normalized" and predictor.domain.sigma_power == 0.0
    assert (out / "weights.safetensors").read_bytes() == weights
    card = (out / "README.md").read_text()
    assert "## SCF residual bound" in card and "calibrate --operation domain" in card and "## Chemical domain" in card
    assert predictor.training is not None and predictor.training.n_atoms == (3, 3)
    metrics = json.loads((out / "metadata.json").read_text())["metrics"]
    assert "previous_calibration" in metrics and "wrote domain.json" in capsys.readouterr().out


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="no shipped water checkpoint")
def test_shipped_water_model_is_accurate_on_a_dataset_conformer(tmp_path):
    pytest.importorskip("pyscf")
    if not DATA.is_file():
        pytest.skip(f"shared data {DATA} absent")
    data = np.load(DATA)
    split = json.loads((SHIPPED / "metadata.json").read_text())["metrics"]
    xyz = write_xyz(tmp_path / "w.xyz", "OHH", data["positions_angstrom"][-1])
    ref = tmp_path / "ref.npy"
    np.save(ref, data["hamiltonian"][-1])
    assert main(["hamiltonian", "predict", str(xyz), "--output", str(tmp_path / "o"), "--reference", str(ref)]) == 0
    row = json.loads((tmp_path / "o" / "w" / "eigenvalues.json").read_text())
    # a conformer of the pool (train or test): within 10x of the shipped test MAE (pyscf H0 rebuilt here, ~1 µHa)
    assert row["h_mae_microhartree"] < 10 * split["h_mae_microhartree"] + 5


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="no shipped water checkpoint")
def test_missing_pyscf_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    import sciml.hamiltonian.scf.h0 as h0

    def no_pyscf():
        raise ImportError("pyscf is not installed; install the quantum extra: pip install 'sciml[quantum]'")

    monkeypatch.setattr(h0, "import_pyscf", no_pyscf)
    xyz = write_xyz(tmp_path / "w.xyz", "OHH", [[0, 0, 0.12], [0, 0.76, -0.47], [0, -0.76, -0.47]])
    assert main(["hamiltonian", "predict", str(xyz), "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "quantum" in err and len(err.splitlines()) == 1


def test_crystal_fit_export_and_predict_a_held_out_crystal_cli(tmp_path, capsys):
    """Synthetic Si-like crystals (tests/unit/test_hamiltonian_crystal_net.py) as DeepH folders: ``sciml fit`` on six
    (split 3/1/1/1), ``sciml export --calibrate``, then ``predict`` on a seventh crystal that is in no split."""
    import shutil

    from sciml.hamiltonian.data.deeph import write_deeph
    from tests.unit.test_hamiltonian_crystal_net import noisy
    from tests.unit.test_hamiltonian_model_crystal import LAYOUT, crystal_config

    rng = np.random.default_rng(0)
    cfg = crystal_config(tmp_path, [noisy(rng) for _ in range(6)], (0.5, 1 / 6, 1 / 6, 1 / 6),
                         loss={"real": 1.0, "eig": 1.0, "eig_scale": 1e-3})
    config = tmp_path / "crystal.yaml"
    config.write_text(yaml.safe_dump(cfg))
    write_deeph(tmp_path / "held_out" / "Si" / "00000", noisy(rng), LAYOUT)
    held = tmp_path / "held_out" / "Si" / "00000"
    model, out = tmp_path / "model", tmp_path / "out"
    assert main(["fit", "--config", str(config)]) == 0
    split = json.loads((tmp_path / "run" / "split.json").read_text())
    assert not any("held_out" in name for part in ("train", "val", "calib", "test") for name in split[part])
    assert main(["export", "--ckpt", str(tmp_path / "run" / "checkpoints" / "best.ckpt"), "--calibrate",
                 "--output", str(model)]) == 0
    capsys.readouterr()
    assert main(["hamiltonian", "predict", "--model", str(model), str(held), "--output", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "gap interval infinite" in stdout and "1/(n+1)" not in stdout and "--alpha 0.5" in stdout, stdout
    row = json.loads((out / "Si-00000" / "bands.json").read_text())
    assert np.isfinite(row["bands_ev"]).all() and len(row["kpts"]) == 3 and row["gap_calibration_sizes"] == [1, 1]
    assert (out / "Si-00000" / "deeph" / "hamiltonians.h5").is_file()
    assert main(["hamiltonian", "predict", "--model", str(model), str(held), "--output", str(out), "--alpha",
                 "0.5"]) == 0
    assert json.loads((out / "Si-00000" / "bands.json").read_text())["gap_lower_ev"] is not None
    capsys.readouterr()
    shutil.copytree(held, tmp_path / "noS" / "Si" / "00000")
    (tmp_path / "noS" / "Si" / "00000" / "overlaps.h5").unlink()
    assert main(["hamiltonian", "predict", "--model", str(model), str(tmp_path / "noS" / "Si" / "00000"),
                 "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "needs H0 and S" in err and len(err.splitlines()) == 1


def test_each_frame_of_a_multi_frame_xyz_is_one_molecule(tmp_path, capsys):
    """Frame k of ``traj.xyz`` is predicted as if it were its own file, into ``traj_000k``; no --reference pairing."""
    pytest.importorskip("pyscf")
    from sciml.hamiltonian.inputs import read_xyz

    numbers, pos = read_xyz(ROOT / "examples" / "hamiltonian" / "water.xyz")
    frames = [pos, pos + np.array([[0.0, 0.0, 0.0], [0.02, 0.0, 0.0], [0.0, -0.02, 0.01]])]
    singles = [write_xyz(tmp_path / f"f{k}.xyz", "OHH", f) for k, f in enumerate(frames)]
    multi = tmp_path / "traj.xyz"
    multi.write_text("".join(p.read_text() for p in singles))
    run = ["hamiltonian", "predict", "--model", str(SHIPPED), "--no-progress", "--output"]
    assert main([*run, str(tmp_path / "m"), str(multi)]) == 0
    assert main([*run, str(tmp_path / "s"), *map(str, singles)]) == 0
    for k in range(2):
        got = json.loads((tmp_path / "m" / f"traj_{k:04d}" / "eigenvalues.json").read_text())
        want = json.loads((tmp_path / "s" / f"f{k}" / "eigenvalues.json").read_text())
        assert got["source"] == f"{multi}@{k}"
        np.testing.assert_allclose(got["orbital_energies_hartree"], want["orbital_energies_hartree"], rtol=0,
                                   atol=1e-10)
    capsys.readouterr()
    assert main([*run, str(tmp_path / "r"), str(multi), "--reference", str(tmp_path / "h.npy")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "holds 2 frames; --reference takes one H" in err and len(err.splitlines()) == 1
