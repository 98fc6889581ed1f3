"""Built-in geometries, seeded conformers, xyz reading, the molecular SCF wrapper and its worker pool."""

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from sciml.hamiltonian.data.gen_molecules import MD17, builtin_molecule, displaced_conformers, read_xyz_frames


@pytest.mark.parametrize("name", list(MD17))
def test_builtin_molecules_are_sane(name):
    numbers, pos = builtin_molecule(name)
    d = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
    np.fill_diagonal(d, np.inf)
    assert 0.9 < d.min() < 1.2  # shortest bond: an X-H bond
    heavy = numbers > 1
    if heavy.sum() > 1:
        assert np.all(d[np.ix_(heavy, heavy)].min(axis=1) < 1.6)  # every heavy atom bonded to another heavy one
    assert np.all(d[~heavy].min(axis=1) < 1.12)  # every H bonded
    assert numbers.sum() % 2 == 0  # closed shell


def test_conformers_do_not_depend_on_how_many_are_asked_for():
    _, pos = builtin_molecule("ethanol")
    a = displaced_conformers(pos, 5, 0.05, seed=1)
    b = displaced_conformers(pos, 2, 0.05, seed=1, start=3)
    np.testing.assert_array_equal(a[3:], b)
    assert abs(np.std(a - pos) - 0.05) < 0.01
    with pytest.raises(ValueError, match="sigma"):
        displaced_conformers(pos, 1, -1.0, seed=1)
    with pytest.raises(ValueError, match="unknown molecule 'benzene'"):
        builtin_molecule("benzene")


def test_xyz_frames(tmp_path):
    path = tmp_path / "t.xyz"
    path.write_text("2\nframe 0\nH 0 0 0\nH 0 0 0.74\n2\nframe 1\nH 0 0 0\nH 0 0 0.75\n")
    numbers, frames = read_xyz_frames(path)
    assert numbers.tolist() == [1, 1] and frames.shape == (2, 2, 3) and frames[1, 1, 2] == 0.75
    path.write_text("2\n\nH 0 0 0\nH 0 0 0.74\n2\n\nH 0 0 0\nO 0 0 0.75\n")
    with pytest.raises(ValueError, match="same atoms in order"):
        read_xyz_frames(path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_xyz_frames(tmp_path / "none.xyz")


def test_scf_wrapper_on_malondialdehyde_minimal_basis():
    pytest.importorskip("pyscf")
    from sciml.hamiltonian.data.generate import SCFSettings, run_molecule_scf
    from sciml.hamiltonian.orbitals import OrbitalLayout

    numbers, pos = builtin_molecule("malondialdehyde")
    res = run_molecule_scf(numbers, pos, SCFSettings(xc="hf", basis="sto-3g", conv_tol=1e-8))
    assert res["converged"] and res["n_occupied"] == 19
    h, s = res["mats"]["H"], res["mats"]["S"]
    eps = np.linalg.eigvalsh(np.linalg.solve(np.linalg.cholesky(s), np.linalg.solve(np.linalg.cholesky(s), h).T))
    assert eps[18] < 0 < eps[19]  # HOMO bound, LUMO above it: a sane closed-shell molecule
    layout = OrbitalLayout.from_ao_labels(numbers, res["ao_labels"])
    assert layout.shells == {8: (0, 0, 1), 6: (0, 0, 1), 1: (0,)}


def test_broad_and_rotated_conformers_keep_the_default_stream():
    """``sigma_max``/``rotate`` draw after the displacement: defaults unchanged; σ per conformer in range; rotation
    keeps every interatomic distance."""
    from sciml.hamiltonian.data.gen_molecules import builtin_molecule, conformer_sigmas, displaced_conformers

    base = builtin_molecule("water")[1]
    plain = displaced_conformers(base, 20, 0.05, 3)
    assert np.array_equal(plain[5], displaced_conformers(base, 1, 0.05, 3, start=5)[0])
    sig = conformer_sigmas(3, 20, 0.03, 3, sigma_max=0.10)
    assert ((sig >= 0.03) & (sig <= 0.10)).all() and sig.std() > 0.01
    broad = displaced_conformers(base, 20, 0.03, 3, sigma_max=0.10)
    # same normal draws, scaled by each conformer's sigma instead of 0.05
    np.testing.assert_allclose(broad - base, (plain - base) / 0.05 * sig[:, None, None], atol=1e-12)
    rot = displaced_conformers(base, 20, 0.03, 3, sigma_max=0.10, rotate=True)
    dist = lambda x: np.linalg.norm(x[:, :, None] - x[:, None], axis=-1)  # noqa: E731
    np.testing.assert_allclose(dist(rot), dist(broad), atol=1e-12)
    assert np.abs(rot - broad).max() > 0.1
    with pytest.raises(ValueError, match="sigma-max"):
        displaced_conformers(base, 2, 0.1, 3, sigma_max=0.05)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_run_leaves_no_worker_behind(tmp_path):
    """The parent of a two-worker pool is killed (SIGKILL): its workers end too, instead of computing on."""
    script = ("import time; from sciml.hamiltonian.data.generate import run_pool; "
              "run_pool(time.sleep, [120, 120], (), 2, False)")
    run = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline, workers = time.monotonic() + 60, []
        while time.monotonic() < deadline and len(workers) < 2:  # spawned workers (and the resource tracker)
            time.sleep(0.2)
            out = subprocess.run(["pgrep", "-P", str(run.pid), "-f", "spawn_main"], capture_output=True, text=True)
            workers = [int(p) for p in out.stdout.split()]
        assert len(workers) == 2
        time.sleep(1.0)  # the initializer has run by the time both workers sleep
        run.kill()
        run.wait()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(map(_running, workers)):
            time.sleep(0.2)
        assert not any(map(_running, workers))
    finally:
        run.kill()


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie waiting to be reaped has exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
