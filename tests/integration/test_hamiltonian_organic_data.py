"""Many-molecule Hamiltonian data: G2 names and lists, the fast H0, a folder of npz files split by molecule."""

from __future__ import annotations

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
    for name in ("H2", "CO", "H2O", "HCN"):
        assert main(["data", "hamiltonian", "--molecule", name, "--n", "3", "--sigma", "0.02", "--sigma-max", "0.05",
                     "--rotate", "--h0", "fast", "--out", str(out), *TINY]) == 0
    return out


def test_folder_reads_every_molecule_with_one_layout(folder):
    structures, layout = read_npz_folder(folder)
    assert sorted({s.meta["molecule"] for s in structures}) == ["CO", "H2", "H2O", "HCN"]
    assert layout.elements() == [1, 6, 7, 8] and len(structures) == 12
    assert {s.meta["h0"] for s in structures} == {"fast"}


def test_split_by_molecule_keeps_each_molecule_in_one_split(folder, tmp_path):
    dm = HamiltonianDataModule(str(folder), split={"fractions": [0.5, 0.25, 0.25, 0.0], "seed": 3, "by": "molecule"},
                               run_dir=str(tmp_path))
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

    from sciml.hamiltonian.data.h0 import zeroth_step_matrices

    mol = gto.M(atom="O 0 0 0.117; H 0 0.757 -0.469; H 0 -0.757 -0.469", basis="def2-svp", verbose=0)
    full, fast = (zeroth_step_matrices(mol, "pbe", 3, m) for m in ("full", "fast"))
    np.testing.assert_allclose(full["S"], fast["S"], atol=1e-14)
    diff = np.abs(full["H0"] - fast["H0"])
    assert 1e-8 < diff.mean() < 2e-5 and diff.max() < 1e-3  # ~µHa: density fitting + grid 1, far below |H - H0|
    with pytest.raises(ValueError, match="unknown H0 method 'cheap'"):
        zeroth_step_matrices(mol, "pbe", 3, "cheap")


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
