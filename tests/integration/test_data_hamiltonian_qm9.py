"""``sciml data hamiltonian --source qm9``: a tiny CPU shard (CH4, NH3, H2O), checksums, sharding, resume, bad input."""

from __future__ import annotations

import importlib.util
import json

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

    def killed_on_second(numbers, positions, settings):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # the run is killed during its second molecule
        return real(numbers, positions, settings)

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
