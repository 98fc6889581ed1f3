"""``sciml hamiltonian predict`` with the shipped water model: domain p-values, flags, notes, shift-aware intervals.

Needs pyscf (S and H0 of each geometry, ~1 s per water molecule). The example geometry's orbital energies are
pinned to the values the shipped model gave before the domain test was added (same weights: only
``calibrator.json``, ``domain.json``, the card and metrics changed), to float64 round-off of pyscf + the model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sciml.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "checkpoints" / "water-pbe-def2svp"
EXAMPLE = ROOT / "examples" / "hamiltonian" / "water.xyz"
# orbital energies (Hartree) of examples/hamiltonian/water.xyz predicted before the domain test was added
PINNED = [-18.73469226216641, -0.8914254674184653, -0.46049340779302406, -0.304832307453994, -0.22847189302572343,
          0.02986834481910227, 0.10753454819756264, 0.5225141984785738]

pytestmark = pytest.mark.skipif(not SHIPPED.is_dir(), reason="no shipped water checkpoint")


def write_xyz(path: Path, pos) -> Path:
    path.write_text("3\nwater\n" + "".join(f"{s} {x:.10f} {y:.10f} {z:.10f}\n" for s, (x, y, z) in zip("OHH", pos,
                                                                                                          strict=True)))
    return path


def geometries(n: int, sigma: float, seed: int):
    from sciml.hamiltonian.data.gen_molecules import builtin_molecule, displaced_conformers

    return displaced_conformers(builtin_molecule("water")[1], n, sigma, seed, rotate=True)


def test_in_and_out_of_domain_rows_notes_and_summary(tmp_path, capsys):
    pytest.importorskip("pyscf")
    stretched = np.array([[0.0, 0.0, 0.117], [0.0, 1.35, -0.60], [0.0, -0.757, -0.469]])  # O–H 1.5 Å
    far = write_xyz(tmp_path / "far.xyz", stretched)
    out = tmp_path / "out"
    assert main(["hamiltonian", "predict", str(EXAMPLE), str(far), "--output", str(out), "--no-progress"]) == 0
    ok = json.loads((out / "water" / "eigenvalues.json").read_text())
    bad = json.loads((out / "far" / "eigenvalues.json").read_text())
    np.testing.assert_allclose(ok["orbital_energies_hartree"], PINNED, rtol=0, atol=1e-9)
    assert ok["in_domain"] is True and ok["domain_pvalue"] > ok["domain_beta"] == 0.05 and ok["interval_guarantee"]
    assert bad["in_domain"] is False and bad["domain_pvalue"] <= 0.05 and not bad["interval_guarantee"]
    assert "no coverage guarantee" in bad["note"] and ok["note"] == ""
    widths = np.subtract(ok["upper_hartree"], ok["lower_hartree"])
    assert len(set(np.round(widths / widths.max(), 9))) > 1  # one width per orbital, not one for all
    captured = capsys.readouterr()
    assert "no coverage guarantee" in captured.out and "(no guarantee)" in captured.out
    assert "1 of 2 out of domain" in captured.err
    # --beta is honoured: a level below every p-value flags nothing
    assert main(["hamiltonian", "predict", str(far), "--output", str(out), "--beta", "0.001", "--no-progress"]) == 0
    assert json.loads((out / "far" / "eigenvalues.json").read_text())["in_domain"] is True


def test_shift_aware_needs_a_batch_and_marks_its_intervals(tmp_path, capsys):
    pytest.importorskip("pyscf")
    files = [write_xyz(tmp_path / f"w{k}.xyz", g) for k, g in enumerate(geometries(6, 0.04, 5))]
    out = tmp_path / "out"
    assert main(["hamiltonian", "predict", *map(str, files[:3]), "--output", str(out), "--shift-aware"]) == 2
    assert "at least 5 molecules" in capsys.readouterr().err
    assert main(["hamiltonian", "predict", *map(str, files), "--output", str(out), "--shift-aware",
                 "--no-progress"]) == 0
    rows = [json.loads((out / f"w{k}" / "eigenvalues.json").read_text()) for k in range(6)]
    assert all("weighted conformal" in r["intervals"] for r in rows)
    for r in rows:  # finite and ordered, or infinite under the ESS guard with the note saying so
        lo, hi = np.array(r["lower_hartree"]), np.array(r["upper_hartree"])
        assert (np.isinf(hi).all() and "effective sample size" in r["note"]) or (lo <= hi).all()
    assert "(shift-aware)" in capsys.readouterr().err


def test_residual_option_writes_the_residual_and_the_bound(tmp_path, capsys):
    """``--residual``: r(H) of each prediction, and q·r(H) once the artifact carries residual.json."""
    pytest.importorskip("pyscf")
    from sciml.core.io.artifact import add_extra_files
    from sciml.hamiltonian.scf.residual import RESIDUAL_FILE

    out = tmp_path / "plain"
    assert main(["hamiltonian", "predict", str(EXAMPLE), "--output", str(out), "--no-progress", "--residual"]) == 0
    row = json.loads((out / "water" / "eigenvalues.json").read_text())
    assert row["scf_residual_microhartree"] > 0 and row["h_mae_bound_microhartree"] is None
    text = capsys.readouterr()
    assert "SCF residual" in text.out and "SCF residual" in text.err  # summary line and timing line
    model = tmp_path / "model"
    import shutil

    shutil.copytree(SHIPPED, model)
    add_extra_files(model, {RESIDUAL_FILE: {"alpha": 0.1, "scores": [0.1 * i for i in range(1, 10)]}})
    out = tmp_path / "bound"
    assert main(["hamiltonian", "predict", str(EXAMPLE), "--model", str(model), "--output", str(out),
                 "--no-progress", "--residual", "--alpha", "0.1"]) == 0
    bound = json.loads((out / "water" / "eigenvalues.json").read_text())
    assert bound["scf_residual_microhartree"] == pytest.approx(row["scf_residual_microhartree"], rel=1e-9)
    assert bound["h_mae_bound_microhartree"] == pytest.approx(0.9 * row["scf_residual_microhartree"], rel=1e-9)
    assert "H MAE <=" in bound["note"] and "H MAE <=" in capsys.readouterr().out
    np.testing.assert_allclose(bound["orbital_energies_hartree"], PINNED, rtol=0, atol=1e-9)  # prediction unchanged


@pytest.mark.parametrize("option", [["--residual"], ["--refine", "3"]])
def test_residual_or_refine_with_a_crystal_model_is_a_one_line_error(tmp_path, capsys, option):
    crystal = ROOT / "checkpoints" / "si-c-pbe-gth"
    if not crystal.is_dir():
        pytest.skip("no shipped crystal checkpoint")
    cif = ROOT / "examples" / "hamiltonian" / "Si.cif"
    assert main(["hamiltonian", "predict", str(cif), "--model", str(crystal), "--output", str(tmp_path / "o"),
                 *option]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "--residual and --refine apply to molecule models" in err
    assert len(err.splitlines()) == 1


def test_molecule_larger_than_every_training_molecule_is_out_of_domain_with_a_note(tmp_path, capsys):
    """A water dimer (6 atoms, 2 heavy) for the water model (trained on 3 atoms): predicted, marked, p-value kept."""
    pytest.importorskip("pyscf")
    dimer = tmp_path / "dimer.xyz"
    dimer.write_text("6\nwater dimer\nO -1.551 -0.115 0.0\nH -1.934 0.763 0.0\nH -0.600 0.041 0.0\n"
                     "O 1.351 0.112 0.0\nH 1.680 -0.374 -0.759\nH 1.680 -0.374 0.759\n")
    out = tmp_path / "out"
    assert main(["hamiltonian", "predict", str(EXAMPLE), str(dimer), "--output", str(out), "--no-progress",
                 "--beta", "1e-9"]) == 0  # a beta below every p-value: only the size rule can flag it
    row = json.loads((out / "dimer" / "eigenvalues.json").read_text())
    assert row["in_domain"] is False and not row["interval_guarantee"] and row["domain_pvalue"] is not None
    assert row["note"].startswith("larger than every training molecule (6 atoms, 2 heavy; trained on 3 atoms, 1 "
                                  "heavy): size extrapolation, out of domain")
    assert "no coverage guarantee" in row["note"]
    ok = json.loads((out / "water" / "eigenvalues.json").read_text())
    assert ok["in_domain"] is True and ok["note"] == ""
    captured = capsys.readouterr()
    assert "larger than every training molecule" in captured.out and "1 of 2 out of domain" in captured.err
    card = (SHIPPED / "README.md").read_text()
    assert "## Chemical domain" in card and "- Sizes: 3 atoms, 1 heavy (non-H) atoms" in card
