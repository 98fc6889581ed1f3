"""End to end on crystals: tiny Si data (pyscf.pbc) → ``sciml fit`` (configs/hamiltonian/si-c.yaml, tiny) →
``sciml export --calibrate`` → ``sciml hamiltonian predict`` from POSCAR/CIF.

Generator settings are tiny (gth-szv, Γ-only SCF, 3×3×3 Fock mesh, 6 Å pair cutoff, 20 Ha plane-wave cutoff:
~4 s per structure). The run sees structures 0-4 (split 2/1/1/1); structure 5 is in no split. A training
structure predicted from a POSCAR written from its geometry: H0(R) and S(R) built from the file must equal the
training folder's (same code path, same settings), so the predicted bands must equal the folder prediction's to
round-off (1e-9 eV). Structure 5 is read from a CIF; its bands are checked against pyscf's.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sciml.cli.main import main

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("pyscf")
SETTINGS = {"kmesh": (1, 1, 1), "fock_kmesh": (3, 3, 3), "cutoff": 6.0, "ke_cutoff": 20.0, "conv_tol": 1e-8}


def make_data(root: Path, n: int) -> Path:
    from sciml.hamiltonian.data.gen_crystal import CrystalSettings, generate_crystals

    generate_crystals("Si", n, 0.05, 0, CrystalSettings(**SETTINGS), root, progress=False)
    return root / "deeph" / "Si"


def write_structure(folder: Path, path: Path) -> Path:
    from pymatgen.core import Lattice, Structure

    from sciml.hamiltonian.data.deeph import read_deeph

    s, _ = read_deeph(folder)
    Structure(Lattice(s.lattice), s.numbers.tolist(), s.positions, coords_are_cartesian=True).to(filename=str(path))
    return path


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """Six tiny Si structures; ``sciml fit`` + ``export`` on 0-4, structure 5 held out of every split."""
    import shutil

    import yaml

    tmp = tmp_path_factory.mktemp("crys")
    data = make_data(tmp / "data", 6)
    for k in range(5):
        shutil.copytree(data / f"{k:05d}", tmp / "train" / "Si" / f"{k:05d}")
    cfg = yaml.safe_load((ROOT / "configs" / "hamiltonian" / "si-c.yaml").read_text())
    cfg["run_dir"] = str(tmp / "run")
    cfg["data"] |= {"path": str(tmp / "train"), "split": {"fractions": [0.4, 0.2, 0.2, 0.2], "seed": 0}}
    cfg["model"]["ridge"]["centres"] = [1.5, 2.5, 3.5, 4.5, 6.0]
    cfg["trainer"] |= {"max_epochs": 4, "check_val_every_n_epoch": 1, "enable_progress_bar": False,
                       "enable_model_summary": False}
    (tmp / "si.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["fit", "--config", str(tmp / "si.yaml")]) == 0
    assert main(["export", "--ckpt", str(tmp / "run" / "checkpoints" / "best.ckpt"), "--calibrate", "--output",
                 str(tmp / "model")]) == 0
    train = json.loads((tmp / "run" / "split.json").read_text())["train"]
    return tmp, data, Path(train[0]).name


def test_predict_from_poscar_matches_folder_and_beats_h0(fitted, capsys):
    tmp, data, k = fitted
    poscar = write_structure(data / k, tmp / "POSCAR")
    assert main(["hamiltonian", "predict", "--model", str(tmp / "model"), str(poscar), str(data / k),
                 "--output", str(tmp / "out"), "--reference", str(data / k), str(data / k),
                 "--kpath", "20", "--plot"]) == 0
    out = capsys.readouterr().out
    assert "VBM" in out and "gap interval infinite" in out
    rows = [json.loads(p.read_text()) for p in sorted((tmp / "out").glob("*/bands.json"))]
    from_file = next(r for r in rows if r["source"].endswith("POSCAR"))
    from_folder = next(r for r in rows if r is not from_file)
    for key in ("kpath", "mesh"):
        assert np.allclose(from_file[key]["bands_ev"], from_folder[key]["bands_ev"], atol=1e-9)
    # a training structure: the model must reproduce the pyscf bands better than H0 does
    assert from_file["model_occupied_band_mae_mev"] < 0.5 * from_file["h0_occupied_band_mae_mev"]
    assert from_file["gap_ev"] == pytest.approx(from_file["cbm_ev"] - from_file["vbm_ev"])
    # one calibration structure: n < 1/alpha - 1 at alpha = 0.1, so the conformal radius is infinite (null)
    assert from_file["band_radius_ev"][0] is None and from_file["gap_lower_ev"] is None
    assert from_file["gap_calibration_sizes"] == [1, 1]
    assert (Path(from_file["folder"]) / "bands.png").is_file()
    assert (Path(from_file["folder"]) / "deeph" / "hamiltonians.h5").is_file()
    ticks = [label for _, label in from_file["kpath"]["ticks"]]
    assert "\\Gamma" in ticks and "X" in ticks  # fcc path (symprec absorbs the 0.05 Å displacements)


def test_bad_crystal_inputs(fitted, tmp_path, capsys, monkeypatch):
    tmp, data, _ = fitted
    model = str(tmp / "model")
    bad = tmp_path / "broken.cif"
    bad.write_text("data_x\n_cell_length_a nonsense\n")
    carbon = tmp_path / "C.cif"
    from pymatgen.core import Lattice, Structure

    Structure(Lattice.cubic(3.57), ["C", "C"], [[0, 0, 0], [0.25, 0.25, 0.25]]).to(filename=str(carbon))
    cases = [([str(bad)], "broken.cif"), ([str(carbon)], "outside the trained orbital basis"),
             ([str(tmp_path / "missing.cif")], "no such file")]
    for inputs, needle in cases:
        assert main(["hamiltonian", "predict", "--model", model, *inputs, "--output", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, err
    import shutil

    shutil.copytree(data / "00000", tmp_path / "noH")
    (tmp_path / "noH" / "hamiltonians.h5").unlink()
    assert main(["hamiltonian", "predict", "--model", model, str(data / "00000"), "--output", str(tmp_path / "o"),
                 "--reference", str(tmp_path / "noH")]) == 2
    assert "no hamiltonians.h5" in capsys.readouterr().err
    import yaml

    shutil.copytree(tmp / "model", tmp_path / "old_model")  # a model without generator settings
    cfg = yaml.safe_load((tmp_path / "old_model" / "config.yaml").read_text())
    cfg["module"]["meta"]["generator"] = {}
    (tmp_path / "old_model" / "config.yaml").write_text(yaml.safe_dump(cfg))
    poscar = write_structure(data / "00000", tmp_path / "POSCAR")
    assert main(["hamiltonian", "predict", "--model", str(tmp_path / "old_model"), str(poscar), "--output",
                 str(tmp_path / "o")]) == 2
    assert "stores no pyscf.pbc generator settings" in capsys.readouterr().err
    import sciml.hamiltonian.scf.h0 as h0

    def no_pyscf():
        raise ImportError("pyscf is not installed; install the extra: pip install 'sciml[quantum]'")

    monkeypatch.setattr(h0, "import_pyscf", no_pyscf)
    assert main(["hamiltonian", "predict", "--model", model, str(poscar), "--output", str(tmp_path / "o")]) == 2
    assert "pyscf" in capsys.readouterr().err


def test_held_out_crystal_bands_from_cif(fitted):
    """Structure 5 (in no split) from a CIF (pymatgen wraps atoms and rotates the cell: bands are invariant).

    The pyscf bands are compared at five off-mesh k-points. ``reference_h`` (the pyscf H(R) truncated at the 6 Å
    cutoff) sets the floor no model of these blocks can beat; the model must close >= 90% of H0's excess over
    that floor.
    """
    tmp, data, _ = fitted
    cif = write_structure(data / "00005", tmp / "held.cif")
    assert main(["hamiltonian", "predict", "--model", str(tmp / "model"), str(cif), "--output",
                 str(tmp / "held_out"), "--reference", str(data / "00005"), "--alpha", "0.5"]) == 0
    row = json.loads((tmp / "held_out" / "held" / "bands.json").read_text())
    floor, h0 = row["reference_h_occupied_band_mae_mev"], row["h0_occupied_band_mae_mev"]
    assert row["model_occupied_band_mae_mev"] < floor + 0.1 * (h0 - floor)
    assert all(r is not None for r in row["band_radius_ev"])  # n = 1 score per band: finite at alpha = 0.5
