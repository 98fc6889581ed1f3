"""What a new user meets with molecule models: the Python face, open-shell molecules, elements a model does not know,
and the argument checks of ``sciml hamiltonian calibrate`` (all before any pyscf or model work; ~5 s)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sciml.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
WATER = ROOT / "checkpoints" / "water-pbe-def2svp"
ORGANIC = ROOT / "checkpoints" / "organic-pbe-def2svp"
CRYSTAL = ROOT / "checkpoints" / "si-c-pbe-gth"
EXAMPLE = ROOT / "examples" / "hamiltonian" / "water.xyz"

pytestmark = pytest.mark.skipif(not (WATER.is_dir() and ORGANIC.is_dir()), reason="no shipped molecule checkpoints")


def write_xyz(path: Path, atoms: list[tuple[str, float, float, float]]) -> Path:
    path.write_text(f"{len(atoms)}\n{path.stem}\n" + "".join(f"{s} {x} {y} {z}\n" for s, x, y, z in atoms))
    return path


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and len(err.splitlines()) == 1, err
    return err


def test_python_face_predicts_like_the_command(tmp_path, capsys):
    pytest.importorskip("pyscf")
    import sciml.hamiltonian as ham

    assert {"load_model", "predict", "MoleculePrediction"} <= set(ham.__all__)
    predictor = ham.load_model("checkpoints/water-pbe-def2svp")
    results = ham.predict([EXAMPLE], model=predictor)
    assert len(results) == 1 and isinstance(results[0], ham.MoleculePrediction)
    res = results[0]
    assert res.source == str(EXAMPLE) and res.n_occupied == 5 and res.hamiltonian.shape == (24, 24)
    assert res.lower[0] <= res.orbital_energies[0] <= res.upper[0] and res.gap.lower <= res.gap.gap <= res.gap.upper
    assert main(["hamiltonian", "predict", str(EXAMPLE), "--model", str(WATER), "--output", str(tmp_path),
                 "--no-progress"]) == 0
    row = json.loads((tmp_path / "water" / "eigenvalues.json").read_text())
    # same inputs and weights; the command may run on another thread count, so float64 sums can differ in the
    # last bits (a few ulp of |H| ~ 20 Ha), not more
    assert row["note"] == res.note
    np.testing.assert_allclose(row["orbital_energies_hartree"], res.orbital_energies, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.load(tmp_path / "water" / "hamiltonian.npy"),
                               predictor.layout.to_pyscf(res.hamiltonian, [8, 1, 1]), rtol=0, atol=1e-12)
    capsys.readouterr()


@pytest.mark.parametrize(("name", "atoms", "model"), [
    ("methyl", [("C", 0, 0, 0), ("H", 1.08, 0, 0), ("H", -0.54, 0.935, 0), ("H", -0.54, -0.935, 0)], ORGANIC),
    ("no", [("N", 0, 0, 0), ("O", 0, 0, 1.15)], None)])
def test_open_shell_molecules_are_a_one_line_refusal_naming_the_file(tmp_path, capsys, name, atoms, model):
    path = write_xyz(tmp_path / f"{name}.xyz", atoms)
    extra = ["--model", str(model)] if model else []
    assert main(["hamiltonian", "predict", str(path), *extra, "--output", str(tmp_path / "o"), "--no-progress"]) == 2
    err = one_line_error(capsys)
    assert f"{path}: " in err and "odd count" in err and "closed-shell" in err
    assert not (tmp_path / "o").exists()


def test_elements_the_default_model_does_not_know_name_the_model_that_does(tmp_path, capsys):
    hcn = write_xyz(tmp_path / "hcn.xyz", [("H", 0, 0, -1.06), ("C", 0, 0, 0), ("N", 0, 0, 1.16)])
    assert main(["hamiltonian", "predict", str(hcn), "--output", str(tmp_path / "o"), "--no-progress"]) == 2
    err = one_line_error(capsys)
    assert f"{hcn}: element(s) C, N are outside the trained orbital basis (H, O)" in err
    assert "--model organic-pbe-def2svp" in err


@pytest.mark.parametrize(("args", "message"), [
    (["--model", "organic-pbe-def2svp", "--operation", "residual"], "is a shipped model: pass --output"),
    (["--model", str(ORGANIC), "--operation", "refine", "--output", "{tmp}/c"], "--operation refine needs --data"),
    (["--model", str(ORGANIC), "--operation", "refine", "--data", "{tmp}/cal", "--output", "{tmp}/c"],
     "uracil are not calibration molecules"),
    (["--model", str(ORGANIC), "--operation", "refine", "--data", "{tmp}", "--steps", "0", "--output", "{tmp}/c"],
     "--steps must be >= 1"),
    (["--model", str(WATER), "--operation", "domain", "--alpha", "1.5", "--output", "{tmp}/c"], "alpha"),
    (["--model", str(WATER), "--operation", "domain", "--data", "{tmp}/nowhere.npz", "--output", "{tmp}/c"],
     "nowhere.npz"),
    (["--model", str(WATER), "--operation", "domain", "--extra-calib", "{tmp}/x.npz", "--output", "{tmp}/c"],
     "--extra-calib and --declared-domain go together"),
    (["--model", str(WATER), "--operation", "residual", "--output", "{tmp}"], "already exists"),
    (["--model", str(CRYSTAL), "--operation", "domain", "--output", "{tmp}/c"], "not a molecule Hamiltonian model"),
    (["--model", "organic-pbe-def2sv", "--operation", "domain"], "did you mean organic-pbe-def2svp")])
def test_calibrate_checks_its_arguments_before_any_work(tmp_path, capsys, args, message):
    (tmp_path / "cal").mkdir()
    (tmp_path / "cal" / "uracil.npz").write_bytes(b"")  # a held-out molecule of the organic model: never calibrates
    argv = [a.format(tmp=tmp_path) for a in args]
    assert main(["hamiltonian", "calibrate", *argv]) == 2
    assert message in one_line_error(capsys)
    assert not (tmp_path / "c").exists()


def test_top_level_calibrate_forwards_to_the_hamiltonian_family(tmp_path, capsys):
    assert main(["calibrate", "--model", str(ORGANIC), "--operation", "refine", "--output", str(tmp_path / "c")]) == 2
    assert "--operation refine needs --data" in one_line_error(capsys)


@pytest.mark.parametrize(("name", "atoms", "element"), [
    ("thiophene", [("S", 0, 0, 1.19), ("C", 0, 1.23, 0.18), ("C", 0, -1.23, 0.18), ("C", 0, 0.71, -1.10),
                   ("C", 0, -0.71, -1.10), ("H", 0, 2.26, 0.50), ("H", 0, -2.26, 0.50), ("H", 0, 1.32, -1.99),
                   ("H", 0, -1.32, -1.99)], "S"),
    ("chloromethane", [("C", 0, 0, 0), ("Cl", 0, 0, 1.78), ("H", 1.03, 0, -0.36), ("H", -0.51, 0.89, -0.36),
                       ("H", -0.51, -0.89, -0.36)], "Cl"),
    ("phosphine", [("P", 0, 0, 0), ("H", 1.42, 0, 0), ("H", -0.18, 1.41, 0), ("H", -0.18, -0.35, 1.37)], "P")])
def test_organic_model_refuses_elements_it_never_saw_in_one_line(tmp_path, capsys, name, atoms, element):
    """S, Cl, P: never in the organic model's training molecules (its card says so); refused before any pyscf work."""
    path = write_xyz(tmp_path / f"{name}.xyz", atoms)
    assert main(["hamiltonian", "predict", str(path), "--model", "organic-pbe-def2svp", "--output",
                 str(tmp_path / "o"), "--no-progress"]) == 2
    err = one_line_error(capsys)
    assert f"{path}: element(s) {element} are outside the trained orbital basis (H, C, N, O)" in err
    assert "no shipped model covers them; train one on these elements" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
    card = (ORGANIC / "README.md").read_text()
    assert "## Chemical domain" in card and "- Elements: H, C, N, O" in card and "refused" in card
