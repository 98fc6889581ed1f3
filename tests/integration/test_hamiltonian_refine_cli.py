"""``sciml hamiltonian predict --refine K``: the organic model's prediction refined by K Fock builds.

On a water conformer the refined H lands on the fixed point of the refinement's Fock builds (the model's ``"fast"``
build made on a coarse grid corrected at the SAD density, sciml.hamiltonian.scf.two_grid), up to its last
residual; that fixed point differs from the reference SCF (exact Coulomb, grid 3) by the fast method's error and the
grid correction's change, ~28 µHa for water, while the unrefined prediction is thousands of µHa off. The
output says how it was made. Bad combinations are one-line errors. Needs pyscf (~10 s).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sciml.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
ORGANIC = ROOT / "checkpoints" / "organic-pbe-def2svp"
EXAMPLE = ROOT / "examples" / "hamiltonian" / "water.xyz"

pytestmark = pytest.mark.skipif(not ORGANIC.is_dir(), reason="no shipped organic checkpoint")


def _reference(tmp_path: Path) -> tuple[Path, np.ndarray, float]:
    """Reference H of the example (pyscf order; the SCF ``sciml data hamiltonian`` runs), the refinement's
    fixed point (its Fock builds iterated to convergence) and that iteration's last residual (µHa)."""
    from pyscf import gto

    from sciml.hamiltonian.data.generate import SCFSettings, run_molecule_scf
    from sciml.hamiltonian.inputs import read_xyz
    from sciml.hamiltonian.scf.h0 import fock_solver
    from sciml.hamiltonian.scf.refine import refine
    from sciml.hamiltonian.scf.two_grid import TwoGridFock

    numbers, pos = read_xyz(EXAMPLE)
    path = tmp_path / "reference.npy"
    np.save(path, run_molecule_scf(numbers, pos, SCFSettings(threads=1))["mats"]["H"])
    mol = gto.M(atom=[(int(z), tuple(p)) for z, p in zip(numbers, pos, strict=True)], basis="def2-svp",
                unit="Angstrom", verbose=0)
    fast = fock_solver(mol, "pbe", method="fast", keep_factors=True)
    guess = fast.get_init_guess(key="minao")
    h0 = fast.get_fock(dm=guess)
    # Anderson steps here: the fixed point reached another way than the Newton steps predict takes
    out = refine(h0, TwoGridFock(fast, h0, guess, cache_mb=64.0), fast.get_ovlp(), mol.nelectron // 2, 40,
                 method="anderson")
    assert out.residuals[-1] < 1e-3  # µHa
    return path, out.hamiltonian, out.residuals[-1]


def test_refined_prediction_is_near_the_scf_and_says_so(tmp_path, capsys):
    pytest.importorskip("pyscf")
    ref, fixed_point, reached = _reference(tmp_path)
    floor = np.abs(fixed_point - np.load(ref)).mean() * 1e6
    rows = {}
    for k in (0, 8):
        out = tmp_path / f"k{k}"
        assert main(["hamiltonian", "predict", str(EXAMPLE), "--model", str(ORGANIC), "--output", str(out),
                     "--no-progress", "--refine", str(k), "--reference", str(ref)]) == 0
        rows[k] = json.loads((out / "water" / "eigenvalues.json").read_text())
    text = capsys.readouterr()
    refined = rows[8]["h_mae_microhartree"]
    last = rows[8]["refine_residuals_microhartree"][-1]
    assert abs(refined - floor) <= max(last, reached) and last < 1.0  # µHa; either may be the nearer
    assert 100 * refined < rows[0]["h_mae_microhartree"]
    assert rows[8]["refine_steps"] == 8 and len(rows[8]["refine_residuals_microhartree"]) == 8
    assert rows[8]["refine_method"] == "newton"
    assert "refine_steps" not in rows[0] and rows[0]["interval_guarantee"] in (True, False)
    assert rows[8]["interval_guarantee"] is False and "refined by 8 Fock builds" in rows[8]["note"]
    from scipy.linalg import eigh, eigvalsh

    h, s = (np.load(tmp_path / "k8" / "water" / f"{name}.npy") for name in ("hamiltonian", "overlap"))
    got = np.asarray(rows[8]["orbital_energies_hartree"])
    exact = eigh(fixed_point, s, eigvals_only=True)[:len(got)]
    # Weyl for H C = S C ε: |Δε| <= ||ΔH||_2 / λ_min(S)
    assert np.abs(got - exact).max() <= np.linalg.norm(h - fixed_point, 2) / eigvalsh(s)[0] + 1e-12
    widths = [np.subtract(r["upper_ev"], r["lower_ev"]) for r in (rows[0], rows[8])]
    np.testing.assert_allclose(widths[1], widths[0], rtol=1e-9)  # intervals keep their widths
    assert "refined (8 Fock builds" in text.out and ", refine " in text.err
    assert np.abs(h - np.load(ref)).mean() * 1e6 == pytest.approx(rows[8]["h_mae_microhartree"], rel=1e-9)


def test_a_refined_calibrator_gives_the_intervals_of_its_steps(tmp_path, capsys):
    """With ``refine_calibrator.json`` fitted for K builds, ``--refine K`` takes its per-orbital widths."""
    pytest.importorskip("pyscf")
    import shutil

    import torch

    from sciml.core.io.artifact import add_extra_files
    from sciml.hamiltonian.scf.refine_calibration import REFINE_FILE, RefinedCalibration
    from sciml.uq.mondrian import MondrianConformal

    model = tmp_path / "model"
    shutil.copytree(ORGANIC, model)
    groups = torch.arange(-5, 3).repeat(9)  # water: 5 occupied, 3 virtual orbitals; 9 scores per group
    scores = (1e-3 * (groups + 6).double()) * torch.linspace(0.1, 1.0, 9).repeat_interleave(8)
    cal = MondrianConformal(score="absolute", alpha=0.1).fit(scores, groups)
    add_extra_files(model, {REFINE_FILE: RefinedCalibration(3, cal, ["m"]).to_dict()})
    rows = {}
    for k in (3, 4):
        out = tmp_path / f"k{k}"
        assert main(["hamiltonian", "predict", str(EXAMPLE), "--model", str(model), "--output", str(out),
                     "--no-progress", "--refine", str(k), "--alpha", "0.1"]) == 0
        rows[k] = json.loads((out / "water" / "eigenvalues.json").read_text())
    half = 0.5 * np.subtract(rows[3]["upper_hartree"], rows[3]["lower_hartree"])
    # 9 scores per group at alpha 0.1: the largest, 1e-3 (g + 6) Ha
    np.testing.assert_allclose(half, 1e-3 * (np.arange(-5, 3) + 6), rtol=0, atol=1e-13)  # rounding at |ε| ~ 19 Ha
    assert rows[3]["interval_guarantee"] is (rows[3]["in_domain"] is not False)
    assert "refined by 3 Fock builds" in rows[3]["intervals"]
    assert rows[4]["interval_guarantee"] is False and "no refined calibrator for 4 newton builds" in rows[4]["note"]
    # the normalised score: half-width q_g (|ε_K − ε_{K−1}| + m), the change in the last build as written
    normalised = MondrianConformal(score="normalized", alpha=0.1).fit(scores, groups)
    add_extra_files(model, {REFINE_FILE: RefinedCalibration(3, normalised, ["m"], floor=2e-3).to_dict()})
    out = tmp_path / "scaled"
    assert main(["hamiltonian", "predict", str(EXAMPLE), "--model", str(model), "--output", str(out),
                 "--no-progress", "--refine", "3", "--alpha", "0.1"]) == 0
    row = json.loads((out / "water" / "eigenvalues.json").read_text())
    change = np.asarray(row["refine_last_change_hartree"])
    assert np.abs(change).max() > 0 and "scaled by each orbital's change" in row["intervals"]
    half = 0.5 * np.subtract(row["upper_hartree"], row["lower_hartree"])
    np.testing.assert_allclose(half, 1e-3 * (np.arange(-5, 3) + 6) * (np.abs(change) + 2e-3), rtol=0, atol=1e-13)
    capsys.readouterr()


@pytest.mark.parametrize(("extra", "message"), [(["--refine", "-1"], "--refine must be >= 0"),
                                                (["--refine", "2", "--residual"], "drop --residual"),
                                                (["--refine", "2", "--shift-aware"], "drop one")])
def test_bad_refine_arguments_are_one_line_errors(tmp_path, capsys, extra, message):
    assert main(["hamiltonian", "predict", str(EXAMPLE), "--model", str(ORGANIC), "--output", str(tmp_path / "o"),
                 "--no-progress", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and len(err.splitlines()) == 1

