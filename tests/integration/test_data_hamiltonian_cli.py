"""``sciml data hamiltonian`` end to end on tiny water runs: outputs, resume, atomicity, bad input."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyscf")

from sciml.cli.main import main
from sciml.hamiltonian.data import generate
from sciml.hamiltonian.data.deeph import read_deeph_tree
from sciml.hamiltonian.data.npz import read_npz

TINY = ["--basis", "sto-3g", "--xc", "hf", "--conv-tol", "1e-9", "--no-progress"]


def test_water_npz_and_deeph_agree_and_resume(tmp_path, capsys):
    out = tmp_path / "w"
    assert main(["data", "hamiltonian", "--molecule", "water", "--n", "2", "--out", str(out), "--format", "both",
                 *TINY]) == 0
    structures, layout = read_npz(out / "water.npz")
    assert len(structures) == 2 and layout.shells == {8: (0, 0, 1), 1: (0,)}
    assert structures[0].meta["n_occupied"] == 5 and structures[0].meta["basis"] == "sto-3g"
    folders, layout2 = read_deeph_tree(out / "deeph" / "water")
    assert layout2 == layout and len(folders) == 2
    for a, b in zip(structures, folders, strict=True):
        np.testing.assert_allclose(a.positions, b.positions, atol=1e-12)
        for name in ("H", "H0", "S"):
            np.testing.assert_allclose(a.to_dense(name, layout), b.to_dense(name, layout), atol=1e-12)
    h, h0, s = (structures[0].to_dense(n, layout, order="pyscf") for n in ("H", "H0", "S"))
    np.testing.assert_allclose(h, h.T, atol=1e-12)
    assert np.allclose(np.diag(s), 1.0, atol=1e-6) and 1e-3 < np.abs(h - h0).max() < 1.0  # H0 is close, not equal
    part = out / "parts" / "water" / "00000.npz"
    stamp = part.stat().st_mtime_ns
    capsys.readouterr()
    assert main(["data", "hamiltonian", "--molecule", "water", "--n", "3", "--out", str(out), "--format", "both",
                 *TINY]) == 0
    assert "1 computed, 2 already done" in capsys.readouterr().err
    assert part.stat().st_mtime_ns == stamp  # finished conformers are not recomputed
    structures3, _ = read_npz(out / "water.npz")
    np.testing.assert_array_equal(structures3[1].positions, structures[1].positions)  # same geometry per index


def test_interrupted_run_leaves_only_complete_parts(tmp_path, monkeypatch):
    out = tmp_path / "w"
    real = generate.run_molecule_scf
    calls = {"n": 0}

    def flaky(numbers, positions, settings, **kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # killed during the second conformer
        return real(numbers, positions, settings, **kw)

    monkeypatch.setattr(generate, "run_molecule_scf", flaky)
    assert main(["data", "hamiltonian", "--molecule", "water", "--n", "2", "--out", str(out), *TINY]) == 130
    parts = sorted(p.name for p in (out / "parts" / "water").iterdir())
    assert parts == ["00000.npz"] and not (out / "water.npz").exists()
    monkeypatch.setattr(generate, "run_molecule_scf", real)
    assert main(["data", "hamiltonian", "--molecule", "water", "--n", "2", "--out", str(out), *TINY]) == 0
    assert len(read_npz(out / "water.npz")[0]) == 2


def test_bad_input(tmp_path, capsys, monkeypatch):
    out = tmp_path / "w"
    assert main(["data", "hamiltonian", "--molecule", "benzene", "--out", str(out), *TINY]) == 2
    assert "unknown molecule 'benzene'" in capsys.readouterr().err
    bad = tmp_path / "bad.xyz"
    bad.write_text("2\n\nO 0 0 0\n")
    assert main(["data", "hamiltonian", "--xyz", str(bad), "--out", str(out), *TINY]) == 2
    assert "bad.xyz is not a readable xyz file" in capsys.readouterr().err
    traj = tmp_path / "traj.xyz"
    traj.write_text("3\n\nO 0 0 0.117\nH 0 0.757 -0.469\nH 0 -0.757 -0.469\n"
                    "3\n\nO 0 0 0.12\nH 0 0.76 -0.47\nH 0 -0.75 -0.46\n")
    assert main(["data", "hamiltonian", "--xyz", str(traj), "--out", str(out), *TINY]) == 0
    assert len(read_npz(out / "traj.npz")[0]) == 2
    assert main(["data", "hamiltonian", "--xyz", str(traj), "--out", str(out), "--basis", "6-31g", "--xc", "hf",
                 "--no-progress"]) == 2
    assert "already holds traj data made with" in capsys.readouterr().err
    monkeypatch.setitem(__import__("sys").modules, "pyscf", None)
    assert main(["data", "hamiltonian", "--molecule", "water", "--out", str(tmp_path / "x"), *TINY]) == 2
    assert "pip install 'sciml[quantum]'" in capsys.readouterr().err


def test_silicon_crystal_deeph_folder_and_resume(tmp_path, capsys):
    out = tmp_path / "si"
    args = ["data", "hamiltonian", "--crystal", "Si", "--kmesh", "1", "1", "1", "--fock-kmesh", "2", "2", "2",
            "--ke-cutoff", "15", "--cutoff", "6", "--n", "1", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    structures, layout = read_deeph_tree(out / "deeph" / "Si")
    s = structures[0]
    assert layout.shells == {14: (0, 1)} and s.is_periodic and s.lattice.shape == (3, 3)
    assert {"H", "H0", "S"} <= set(s.blocks) and len(s.edges()) == len(s.blocks["H"])
    assert s.meta["n_occupied"] == 4 and len(s.meta["check_bands"]) == 5
    np.testing.assert_allclose(s.blocks["S"][(0, 0, 0, 0, 0)], np.eye(4), atol=1e-6)  # normalised AOs
    capsys.readouterr()
    assert main(args) == 0
    assert "0 computed, 1 already done" in capsys.readouterr().err
    assert main([*args, "--format", "npz"]) == 2
    assert "use --format deeph" in capsys.readouterr().err
