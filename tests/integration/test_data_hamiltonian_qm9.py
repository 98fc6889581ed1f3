"""``sciml data hamiltonian --source qm9``: a tiny CPU shard (CH4, NH3, H2O): compressed checksummed files, card,
failed molecules, sharding, resume after a kill, cheap settings, seeding from a model, bad input."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import zipfile

import numpy as np
import pytest

pytest.importorskip("pyscf")

from sciml.cli.main import main
from sciml.hamiltonian.data import generate, qm9
from sciml.hamiltonian.data.gen_qm9 import check_basis, verify_manifest
from sciml.hamiltonian.data.npz import read_npz

if importlib.util.find_spec("qm9pack") is None:  # its CSVs are read without importing it
    pytest.skip("qm9pack is not installed (pip install 'sciml[qm9]')", allow_module_level=True)

CPU = ["--source", "qm9", "--device", "cpu", "--no-progress"]  # PBE/def2-SVP, the reference settings


def test_tiny_shard_is_checksummed_and_resumes_after_a_kill(tmp_path, capsys, monkeypatch):
    out = tmp_path / "qm9"
    real, calls = generate.run_molecule_scf, {"n": 0}

    def killed_on_second(numbers, positions, settings, **kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # the run is killed during its second molecule
        return real(numbers, positions, settings, **kw)

    monkeypatch.setattr(generate, "run_molecule_scf", killed_on_second)
    assert main(["data", "hamiltonian", *CPU, "--indices", "1-3", "--out", str(out)]) == 130
    assert sorted(p.name for p in out.glob("*.npz")) == ["qm9_000001.npz"] and not (out / "manifest.json").exists()
    first = (out / "qm9_000001.npz").stat().st_mtime_ns
    monkeypatch.setattr(generate, "run_molecule_scf", real)
    capsys.readouterr()
    assert main(["data", "hamiltonian", *CPU, "--indices", "1-3", "--out", str(out)]) == 0
    assert "2 computed, 1 already done (skipped)" in capsys.readouterr().err
    assert (out / "qm9_000001.npz").stat().st_mtime_ns == first  # the finished molecule is not recomputed

    manifest = json.loads((out / "manifest.json").read_text())
    assert [(m["index"], m["smiles"], m["formula"]) for m in manifest["molecules"]] == [
        (1, "C", "CH4"), (2, "N", "H3N"), (3, "O", "H2O")]
    assert manifest["settings"]["basis"] == "def2-svp" and manifest["settings"]["xc"] == "pbe"
    assert manifest["settings"]["density_fit"] is False and manifest["settings"]["grid_level"] == 3
    assert verify_manifest(out) == []
    lines = "".join(f"{m['sha256']}  {m['file']}\n" for m in manifest["molecules"])
    assert manifest["data_sha256"] == hashlib.sha256(lines.encode()).hexdigest() and manifest["n_failed"] == 0
    assert all(m["scf_guess"] == "minao" and m["scf_cycles"] > 0 for m in manifest["molecules"])
    with zipfile.ZipFile(out / "qm9_000003.npz") as z:  # compact: zlib-compressed members, float64 kept
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_DEFLATED}
    assert json.loads((out / "failed.json").read_text()) == {"n_failed": 0, "molecules": []}
    card = (out / "README.md").read_text()
    for words in ("PBE / def2-svp", "3 computed (C, H, N, O; 3–5 atoms), 0 failed", "QM9 indices**: 1-3",
                  manifest["data_sha256"], "the reference settings"):
        assert words in card
    structures, layout = read_npz(out / "qm9_000003.npz")
    assert structures[0].numbers.tolist() == [8, 1, 1] and structures[0].meta["n_occupied"] == 5
    h, s = (structures[0].to_dense(n, layout, order="pyscf") for n in ("H", "S"))
    np.testing.assert_allclose(h, h.T, atol=1e-12)
    assert np.allclose(np.diag(s), 1.0, atol=1e-6)

    (out / "qm9_000002.npz").write_bytes((out / "qm9_000003.npz").read_bytes())  # a corrupted file is detected
    assert verify_manifest(out) == ["qm9_000002.npz"]
    (out / "qm9_000002.npz").unlink()
    capsys.readouterr()
    assert main(["data", "hamiltonian", *CPU, "--indices", "1-3", "--out", str(out)]) == 0
    assert "1 computed, 2 already done (skipped)" in capsys.readouterr().err
    assert verify_manifest(out) == []


def test_shards_partition_a_seeded_selection(tmp_path, capsys):
    chosen = qm9.select_indices(n=40, seed=3, max_heavy_atoms=6)
    assert chosen == qm9.select_indices(n=40, seed=3, max_heavy_atoms=6) != qm9.select_indices(40, 4, None, 6)
    assert len(set(chosen)) == 40 and (qm9.qm9_table()["n_heavy"][chosen] <= 6).all()
    shards = [qm9.shard_indices(chosen, i, 3) for i in range(3)]
    assert sorted(sum(shards, [])) == chosen and {len(s) for s in shards} <= {13, 14}
    assert qm9.parse_indices("1,2,5-7") == [1, 2, 5, 6, 7] and qm9.parse_shard("2/3") == (2, 3)
    acetylene = qm9.qm9_molecules([4])[0]  # its CSV writes coordinates as 0. and 1.
    assert acetylene.formula == "C2H2" and acetylene.positions[0] == (0.5995394918, 0.0, 1.0)
    with pytest.raises(ValueError, match="unknown QM9 index 200000"):
        qm9.qm9_molecules([4, 200000])
    out = tmp_path / "q"
    assert main(["data", "hamiltonian", *CPU, "--indices", "1-3", "--shard", "1/2", "--basis", "sto-3g",
                 "--out", str(out)]) == 0
    folder = out / "shard-00001-of-00002"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert [m["index"] for m in manifest["molecules"]] == [2] and manifest["selection"]["shard"] == [1, 2]
    assert "qm9 shard 1/2: 1 computed" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["--indices", "1-3", "--shard", "3/2"], "--shard 3/2: need k >= 1 and 0 <= i < k"),
    (["--indices", "1,200000"], "unknown QM9 index 200000"),
    (["--indices", "1,9", "--max-heavy-atoms", "2"], "QM9 index 9 has 3 heavy atoms, more than --max-heavy-atoms 2"),
])
def test_bad_input_is_one_line(tmp_path, capsys, args, message):
    assert main(["data", "hamiltonian", *CPU, *args, "--out", str(tmp_path / "q")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_unsupported_element_and_misplaced_flags(tmp_path, capsys):
    with pytest.raises(ValueError, match="element Og .* has no def2-svp basis"):
        check_basis([1, 6, 118], "def2-svp")
    assert main(["data", "hamiltonian", "--molecule", "water", "--shard", "0/2", "--out", str(tmp_path / "w"),
                 "--no-progress"]) == 2
    assert "use them with --source qm9" in capsys.readouterr().err


def test_slurm_array_template_runs_its_shard(tmp_path):
    """``configs/slurm/data_hamiltonian.sbatch`` run by bash as task 3 of ``--array=2-3``: it computes shard 1/2."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    sciml = Path(sys.executable).parent / "sciml"
    if not sciml.is_file() or shutil.which("bash") is None:
        pytest.skip("needs bash and the sciml console script")
    env = {**os.environ, "PATH": f"{sciml.parent}{os.pathsep}{os.environ['PATH']}", "SLURM_ARRAY_JOB_ID": "7",
           "SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "2", "SLURM_ARRAY_TASK_COUNT": "2",
           "SLURM_CPUS_PER_TASK": "1"}
    script = Path(__file__).resolve().parents[2] / "configs" / "slurm" / "data_hamiltonian.sbatch"
    done = subprocess.run(["bash", str(script), str(tmp_path / "q"), "--indices", "1-3", "--basis", "sto-3g",
                           "--device", "cpu"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "shard 1/2" in done.stdout
    assert verify_manifest(tmp_path / "q" / "shard-00001-of-00002") == []


def test_a_failed_molecule_is_listed_and_the_shard_goes_on(tmp_path, capsys, monkeypatch):
    out = tmp_path / "qm9"
    real = generate.run_molecule_scf

    def water_fails(numbers, positions, settings, **kw):
        res = real(numbers, positions, settings, **kw)
        return {**res, "converged": False} if tuple(numbers) == (8, 1, 1) else res

    monkeypatch.setattr(generate, "run_molecule_scf", water_fails)
    args = ["data", "hamiltonian", *CPU, "--indices", "1-3", "--basis", "sto-3g", "--out", str(out)]
    assert main(args) == 0
    assert "2 computed, 0 already done (skipped), 1 failed (listed in" in capsys.readouterr().err
    failed = json.loads((out / "failed.json").read_text())
    assert failed["n_failed"] == 1 and failed["molecules"][0]["index"] == 3
    assert "SCF did not converge" in failed["molecules"][0]["reason"] and failed["molecules"][0]["formula"] == "H2O"
    manifest = json.loads((out / "manifest.json").read_text())
    assert [m["index"] for m in manifest["molecules"]] == [1, 2] and manifest["n_failed"] == 1
    assert "2 computed" in (out / "README.md").read_text() and "1 failed" in (out / "README.md").read_text()
    assert main(args) == 0  # a rerun does not spend another SCF on the failure
    assert "0 computed, 3 already done (skipped), 1 failed" in capsys.readouterr().err
    monkeypatch.setattr(generate, "run_molecule_scf", real)
    assert main([*args, "--retry-failed"]) == 0
    assert "1 computed, 2 already done (skipped);" in capsys.readouterr().err
    assert json.loads((out / "failed.json").read_text())["n_failed"] == 0 and verify_manifest(out) == []


def test_a_shard_whose_every_molecule_fails_exits_non_zero_in_one_line(tmp_path, capsys, monkeypatch):
    """Nothing computed: the command fails (exit 2, one ``error:`` line naming the first failure and the fix)."""
    out = tmp_path / "qm9"
    real = generate.run_molecule_scf

    def all_fail(numbers, positions, settings, **kw):
        return {**real(numbers, positions, settings, **kw), "converged": False}

    monkeypatch.setattr(generate, "run_molecule_scf", all_fail)
    args = ["data", "hamiltonian", *CPU, "--indices", "1,3", "--basis", "sto-3g", "--out", str(out)]
    for _ in range(2):  # the first run, and a rerun that finds every molecule already failed
        assert main(args) == 2  # EXIT_ERROR, as for every one-line error
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("error: qm9 shard 0/1: all 2 molecule(s) failed")
        assert "QM9 1 (CH4): RuntimeError" in err and "SCF did not converge" in err
        assert str(out / "failed.json") in err and "--retry-failed" in err and "Traceback" not in err
    assert json.loads((out / "manifest.json").read_text())["n_molecules"] == 0
    monkeypatch.setattr(generate, "run_molecule_scf", real)
    assert main([*args, "--retry-failed"]) == 0
    assert "2 computed" in capsys.readouterr().err


def test_cheap_settings_only_where_measured(tmp_path, capsys):
    from sciml.hamiltonian.data.cheap import MEASURED

    passing = [m for m in MEASURED["pbe", "def2-svp"] if m.passes]
    assert passing, "no measured cheap setting passes"
    for flags, message in ((["--grid-level", "0"], "'--grid-level 0' at pbe/def2-svp has no measured H error"),
                           (["--density-fit", "--basis", "sto-3g"], "at pbe/sto-3g has no measured H error")):
        assert main(["data", "hamiltonian", *CPU, "--indices", "3", *flags, "--out", str(tmp_path / "c")]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "c").exists()
    cheap = next(m for m in passing if m.density_fit and m.grid_level == 1 and not m.final_build)
    out = tmp_path / "cheap"
    assert main(["data", "hamiltonian", *CPU, "--indices", "3", *cheap.describe().split(), "--out", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["settings"]["density_fit"] and manifest["settings"]["grid_level"] == 1
    assert manifest["settings"]["measured_error"]["h_mae_uha"] == cheap.h_mae_uha <= 10
    assert "cheap, measured against the reference" in (out / "README.md").read_text()


def test_scf_seeded_from_a_model_prediction(tmp_path, capsys):
    out = tmp_path / "seeded"
    assert main(["data", "hamiltonian", *CPU, "--indices", "3", "--seed-model", "organic-pbe-def2svp",
                 "--out", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["molecules"][0]["scf_guess"] == "model" and manifest["selection"]["seed_model"]
    seeded = read_npz(out / "qm9_000003.npz")[0][0]
    plain = generate.run_molecule_scf((8, 1, 1), np.asarray(qm9.qm9_molecules([3])[0].positions),
                                      generate.SCFSettings(device="cpu"))
    h = seeded.to_dense("H", read_npz(out / "qm9_000003.npz")[1], order="pyscf")
    assert np.abs(h - plain["mats"]["H"]).max() < 1e-5  # same converged H from either start
    refined = tmp_path / "refined"  # the prediction refined by 2 Fock builds first: the same converged H
    assert main(["data", "hamiltonian", *CPU, "--indices", "3", "--seed-model", "organic-pbe-def2svp",
                 "--seed-refine", "2", "--out", str(refined)]) == 0
    assert json.loads((refined / "manifest.json").read_text())["selection"]["seed_refine"] == 2
    structures, layout = read_npz(refined / "qm9_000003.npz")
    again = structures[0].to_dense("H", layout, order="pyscf")
    assert np.abs(again - plain["mats"]["H"]).max() < 1e-5
    capsys.readouterr()
    assert main(["data", "hamiltonian", *CPU, "--indices", "3", "--basis", "sto-3g", "--seed-model",
                 "organic-pbe-def2svp", "--out", str(tmp_path / "b")]) == 2
    assert "trained in basis def2-svp, the SCF uses sto-3g" in capsys.readouterr().err
    assert main(["data", "hamiltonian", *CPU, "--indices", "3", "--seed-refine", "2",
                 "--out", str(tmp_path / "c")]) == 2
    assert "--seed-refine refines the prediction of --seed-model" in capsys.readouterr().err


def test_cpu_path_without_cuda(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "cupy", None)  # as on a machine without CUDA: importing cupy fails
    assert generate.scf_device("auto") == "cpu" and generate.scf_device("cpu") == "cpu"
    dft, scf = generate.scf_modules("cpu")
    assert dft.__name__ == "pyscf.dft" and scf.__name__ == "pyscf.scf"
    with pytest.raises(RuntimeError, match="--device gpu needs gpu4pyscf and a CUDA GPU"):
        generate.scf_device("gpu")


def test_reference_fock_is_built_directly_and_matches_the_stored_integrals(monkeypatch):
    """The final exact build contracts the integrals directly (none stored) and equals pyscf's stored-integral build."""
    from dataclasses import replace

    from pyscf.scf import hf

    mol = generate.pyscf_molecule((8, 1, 1), np.asarray(qm9.qm9_molecules([3])[0].positions), "def2-svp")
    rng = np.random.default_rng(0)
    c = rng.normal(size=(mol.nao, 5))
    dm = 2 * c @ c.T / mol.nao  # symmetric, not converged: the two builds must agree for any density
    cheap = generate.SCFSettings(density_fit=True, grid_level=1, final_build=True, device="cpu")
    with monkeypatch.context() as m:
        m.setattr(hf, "dot_eri_dm", lambda *a, **k: pytest.fail("the reference build stored the integrals"))
        direct = generate.reference_fock(mol, cheap, "cpu", dm)
    reference = replace(cheap, density_fit=False, grid_level=generate.REFERENCE_GRID_LEVEL)
    stored = generate.mean_field(mol, reference, "cpu")
    assert np.abs(direct - stored.get_fock(dm=dm)).max() < 1e-10 and stored._eri is not None
