"""``sciml data release``: a tiny QM9 shard (CH4, NH3, H2O; sto-3g) and a two-conformer ``--molecule`` folder packed
and unpacked: H within half a quantum, H0 and S rebuilt exactly, new files only, resume, checksums, a rebuild that
disagrees, leaving released molecules out of a shard, the committed release."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyscf")

from sciml.cli.main import main
from sciml.hamiltonian.data import qm9, release

if importlib.util.find_spec("qm9pack") is None:
    pytest.skip("qm9pack is not installed (pip install 'sciml[qm9]')", allow_module_level=True)

SHARD = ["data", "hamiltonian", "--source", "qm9", "--device", "cpu", "--no-progress", "--basis", "sto-3g",
         "--h0", "fast"]
COMMITTED = Path(__file__).resolve().parents[2] / "datasets" / "qm9" / "release"


@pytest.fixture(scope="module")
def shard(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("qm9-shard") / "s"
    assert main([*SHARD, "--indices", "1-3", "--out", str(out)]) == 0
    return out


def test_pack_then_unpack_gives_the_shard_back(shard, tmp_path, capsys):
    rel, out = tmp_path / "release", tmp_path / "out"
    assert main(["data", "release", "pack", str(shard), "--release", str(rel)]) == 0
    assert "3 files added" in capsys.readouterr().err
    assert main(["data", "release", "pack", str(shard), "--release", str(rel)]) == 0  # nothing new, no chunk
    assert "0 files added (nothing new); 3 in" in capsys.readouterr().err
    manifest = release.verify_release(rel)
    assert [c["files"] for c in manifest["chunks"]] == [[f"qm9_00000{i}.npz" for i in (1, 2, 3)]]
    assert manifest["n_files"] == 3 and manifest["kind"] == "qm9"
    assert manifest["settings"]["basis"] == "sto-3g" and manifest["settings"]["h0"] == "fast"

    assert main(["data", "release", "unpack", str(rel), "--out", str(out), "--no-progress"]) == 0
    assert "3 files written, 0 already there" in capsys.readouterr().err
    for i in (1, 2, 3):
        name = f"qm9_{i:06d}.npz"
        with np.load(shard / name) as a, np.load(out / name) as b:
            assert set(a.files) == set(b.files)
            gap = np.abs(a["hamiltonian"] - b["hamiltonian"]).max()
            assert gap <= release.QUANTUM / 2 + 1e-12  # rounding to the quantum, nothing more
            np.testing.assert_allclose(b["hamiltonian"][0], b["hamiltonian"][0].T, atol=0)
            for key in ("hamiltonian_0", "overlap"):
                np.testing.assert_allclose(a[key], b[key], rtol=0, atol=1e-10)
            for key in ("atomic_numbers", "positions_angstrom", "ao_labels", "energy_hartree", "scf_cycles",
                        "scf_guess", "n_occupied", "h0_method"):
                np.testing.assert_array_equal(a[key], b[key])
    first = (out / "qm9_000001.npz").stat().st_mtime_ns
    (out / "qm9_000002.npz").unlink()
    assert main(["data", "release", "unpack", str(rel), "--out", str(out), "--no-progress"]) == 0
    assert "1 files written, 2 already there" in capsys.readouterr().err
    assert (out / "qm9_000001.npz").stat().st_mtime_ns == first


def test_new_molecules_of_a_running_shard_become_a_second_chunk(shard, tmp_path):
    partial = tmp_path / "partial"
    shutil.copytree(shard, partial)
    (partial / "qm9_000003.npz").unlink()  # still in flight when the first pack ran
    (partial / "manifest.json").unlink()
    rel = tmp_path / "release"
    assert release.pack([partial], rel)["added"] == 2
    assert release.pack([shard], rel) == {"added": 1, "chunk": str(rel / "chunk-00001.npz"), "n_files": 3}
    assert [len(c["files"]) for c in release.verify_release(rel)["chunks"]] == [2, 1]
    assert [m["file"] for m in release.read_chunk(rel / "chunk-00001.npz")] == ["qm9_000003.npz"]


def test_a_changed_chunk_other_settings_and_a_disagreeing_rebuild_are_one_line_errors(shard, tmp_path, capsys,
                                                                                      monkeypatch):
    rel = tmp_path / "release"
    release.pack([shard], rel)
    other = tmp_path / "other"
    shutil.copytree(shard, other)
    settings = json.loads((other / "qm9.settings.json").read_text())
    (other / "qm9.settings.json").write_text(json.dumps({**settings, "basis": "def2-svp"}))
    assert main(["data", "release", "pack", str(other), "--release", str(rel)]) == 2
    assert "pack it into another release folder" in capsys.readouterr().err

    real = qm9.qm9_molecules

    def moved(indices):  # another geometry than the one the shard was computed at: bonds 1% longer
        return [m.__class__(m.index, m.smiles, m.formula, m.numbers,
                            tuple(tuple(1.01 * x for x in p) for p in m.positions)) for m in real(indices)]

    monkeypatch.setattr(qm9, "qm9_molecules", moved)
    assert main(["data", "release", "unpack", str(rel), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: qm9_000001.npz: rebuilt H0 differs from the packed one") and "\n" not in err
    monkeypatch.setattr(qm9, "qm9_molecules", real)

    chunk = rel / "chunk-00000.npz"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte flipped
    chunk.write_bytes(bytes(data))
    assert main(["data", "release", "unpack", str(rel), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert "sha256 differs from manifest.json; restore it" in capsys.readouterr().err
    assert main(["data", "release", "unpack", str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2
    assert "is " in capsys.readouterr().err


@pytest.mark.skipif(not (COMMITTED / release.MANIFEST).is_file(), reason="no committed QM9 release")
def test_the_committed_release_is_intact_and_readable():
    manifest = release.verify_release(COMMITTED)
    assert manifest["kind"] == "qm9" and manifest["settings"]["h0"] == "fast"
    assert manifest["quantum_hartree"] == release.QUANTUM
    files = [f for c in manifest["chunks"] for f in c["files"]]
    assert len(files) == len(set(files)) == manifest["n_files"]
    first = release.read_chunk(COMMITTED / manifest["chunks"][0]["file"])
    assert [m["file"] for m in first] == manifest["chunks"][0]["files"]
    for m in first:
        (delta,), (diag,) = m["delta_h"], m["h0_diagonal"]
        assert delta.shape == (len(diag), len(diag)) and np.allclose(delta, delta.T)
        assert m["energy"][0] < 0 and m["scf_cycles"][0] > 0


def test_a_molecule_folder_with_conformers_round_trips(tmp_path, capsys):
    folder, rel, out = tmp_path / "mol", tmp_path / "release", tmp_path / "out"
    assert main(["data", "hamiltonian", "--molecule", "H2O,NH3", "--n", "2", "--basis", "sto-3g", "--h0", "fast",
                 "--no-progress", "--out", str(folder)]) == 0
    assert main(["data", "release", "pack", str(folder), "--release", str(rel)]) == 0
    assert release.verify_release(rel)["kind"] == "molecules"
    assert main(["data", "release", "unpack", str(rel), "--out", str(out), "--no-progress"]) == 0
    assert "2 files written" in capsys.readouterr().err
    for name in ("H2O.npz", "NH3.npz"):
        with np.load(folder / name) as a, np.load(out / name) as b:
            assert b["hamiltonian"].shape[0] == 2  # both conformers
            assert np.abs(a["hamiltonian"] - b["hamiltonian"]).max() <= release.QUANTUM / 2 + 1e-12
            for key in ("hamiltonian_0", "overlap"):
                np.testing.assert_allclose(a[key], b[key], rtol=0, atol=1e-10)
            for key in ("atomic_numbers", "positions_angstrom", "ao_labels", "energy_hartree", "n_occupied"):
                np.testing.assert_array_equal(a[key], b[key])
    assert main(["data", "release", "pack", str(tmp_path / "mol"), "--release", str(tmp_path / "r2")]) == 0
    qm9_like = tmp_path / "q"
    qm9_like.mkdir()
    (qm9_like / "qm9.settings.json").write_text((folder / "H2O.settings.json").read_text())
    assert main(["data", "release", "pack", str(qm9_like), "--release", str(tmp_path / "r2")]) == 2
    assert "holds kind qm9, the release molecules" in capsys.readouterr().err


def test_a_shard_leaves_out_what_a_release_holds(shard, tmp_path, capsys):
    rel = tmp_path / "release"
    partial = tmp_path / "partial"
    shutil.copytree(shard, partial)
    (partial / "qm9_000002.npz").unlink()
    release.pack([partial], rel)  # 1 and 3 released
    out = tmp_path / "next"
    assert main([*SHARD, "--indices", "1-3", "--skip-release", str(rel), "--out", str(out)]) == 0
    assert "1 computed, 0 already done" in capsys.readouterr().err
    manifest = json.loads((out / "manifest.json").read_text())
    assert [m["index"] for m in manifest["molecules"]] == [2] and manifest["selection"]["in_release"] == 2
    assert main([*SHARD, "--indices", "1-3", "--skip-release", str(rel), "--conv-tol", "1e-9",
                 "--out", str(tmp_path / "other")]) == 2
    assert "skip only a QM9 release made with the same settings" in capsys.readouterr().err
