"""Generate molecular Hamiltonian data with pyscf: H (converged KS/Fock), H0 (zeroth step), S, energies.

H0 is the Fock matrix of the initial-guess density, ``mf.get_fock(dm=mf.get_init_guess(key="minao"))``
(superposition of atomic densities, NextHAM's zeroth-step Hamiltonian). Every conformer is one job whose result is
written atomically (an npz part in the shared format and/or a DeepH folder), so an interrupted run resumes
where it stopped; the parts are merged into ``<out>/<name>.npz`` at the end.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from sciml.core.io.atomic import atomic_write_text
from sciml.hamiltonian.scf.h0 import import_pyscf

__all__ = ["MoleculeJob", "SCFSettings", "check_settings", "compute_molecule_npz", "generate_molecules",
           "mean_field", "pyscf_molecule", "reference_fock", "run_molecule_scf", "run_pool", "scf_device",
           "scf_modules", "settings_record"]


#: the most AO grid values (MB) a CPU SCF keeps between its builds (sciml.hamiltonian.scf.numint_cache)
SCF_AO_CACHE_MB = 2000
#: DFT grid level of H0's "full" build, the level prediction uses; ``SCFSettings.grid_level`` is the SCF's alone
H0_GRID_LEVEL = 3
#: DFT grid level of the reference settings (a lower ``SCFSettings.grid_level`` is a cheap setting)
REFERENCE_GRID_LEVEL = 3


@dataclass(frozen=True)
class SCFSettings:
    """Level of theory: ``xc`` (``"hf"`` for Hartree-Fock), ``basis``, energy tolerance, DFT grid level.

    ``density_fit`` runs the SCF with density-fitted Coulomb/exchange and ``grid_level`` below 3 on a coarser XC
    grid: cheaper, not the reference; :func:`sciml.hamiltonian.data.cheap.check_cheap` allows only the combinations
    whose measured H error is within 10 µHa. ``final_build`` stores the reference-settings Fock matrix of the
    cheap SCF's converged density (one exact build) instead of the cheap one. ``device`` (``"auto"``, ``"cpu"``,
    ``"gpu"``) picks gpu4pyscf when it imports and CUDA is present (:func:`scf_device`).
    """

    xc: str = "pbe"
    basis: str = "def2-svp"
    conv_tol: float = 1e-10
    grid_level: int = 3
    threads: int = 1
    max_cycle: int = 100
    h0: str = "full"  # how H0 is built: "full" or "fast" (sciml.hamiltonian.scf.h0)
    density_fit: bool = False
    device: str = "auto"
    final_build: bool = False


@dataclass(frozen=True)
class MoleculeJob:
    """One conformer to compute: ``index`` within dataset ``name``."""

    name: str
    index: int
    numbers: tuple[int, ...]
    positions: tuple[tuple[float, float, float], ...]


def pyscf_molecule(numbers, positions, basis: str):
    """The pyscf ``Mole`` of a molecule (atomic numbers, positions in Å), built the one way every engine path uses."""
    from pyscf import gto

    return gto.M(atom=[(int(z), tuple(p)) for z, p in zip(numbers, positions, strict=True)], basis=basis,
                 unit="Angstrom", verbose=0)


def zeroth_step_record(numbers, positions, settings: SCFSettings) -> dict:
    """``{"H0", "S"}`` (pyscf order, Hartree) as stored with the SCF, and how H0 was built.

    ``xc``, ``grid_level`` and ``h0`` record the recipe: the reference grid whatever the SCF's, the way prediction
    builds H0 (:mod:`sciml.hamiltonian.scf.molecule`).
    """
    import_pyscf()
    from sciml.hamiltonian.scf.h0 import zeroth_step_matrices

    mol = pyscf_molecule(numbers, positions, settings.basis)
    return {**zeroth_step_matrices(mol, settings.xc, H0_GRID_LEVEL, settings.h0), "xc": settings.xc,
            "grid_level": H0_GRID_LEVEL, "h0": settings.h0}


def run_molecule_scf(numbers, positions, settings: SCFSettings, dm0: np.ndarray | None = None,
                     zeroth: dict | None = None) -> dict:
    """Restricted KS (or HF) SCF of one closed-shell molecule (positions in Å).

    ``dm0`` (n_ao, n_ao), pyscf order: the SCF's starting density instead of pyscf's ``minao`` guess (e.g. from a
    model's predicted H, :mod:`sciml.hamiltonian.seed`). ``zeroth``: :func:`zeroth_step_record` of this molecule
    and settings when already built (else built here).

    Returns
    -------
    dict
        ``mats`` {"H", "H0", "S"} (n_ao, n_ao) pyscf order, Hartree; ``ao_labels``; ``energy`` (Hartree);
        ``n_occupied``; ``scf_seconds`` (wall time of the SCF and the final build, ``threads`` threads);
        ``scf_cycles``; ``converged``; ``device`` (``"cpu"`` or ``"gpu"``, where the SCF ran; H0 and S are always
        built on the CPU).

    """
    import_pyscf()
    from pyscf import lib

    lib.num_threads(settings.threads)
    mol = pyscf_molecule(numbers, positions, settings.basis)
    if mol.nelectron % 2:
        raise ValueError(f"molecule with {mol.nelectron} electrons is open-shell; only closed shells are supported")
    device = scf_device(settings.device)
    start = time.perf_counter()
    mf = mean_field(mol, settings, device, iterative=True)
    mf.kernel(dm0=dm0)
    fock = _host(mf.get_fock())
    if settings.final_build and (settings.density_fit or settings.grid_level != REFERENCE_GRID_LEVEL):
        fock = reference_fock(mol, settings, device, mf.make_rdm1())
    seconds = time.perf_counter() - start
    zeroth = zeroth or zeroth_step_record(numbers, positions, settings)
    mats = {"H": fock, "H0": zeroth["H0"], "S": zeroth["S"]}
    return {"mats": mats, "ao_labels": mol.ao_labels(), "energy": float(mf.e_tot), "n_occupied": mol.nelectron // 2,
            "scf_seconds": seconds, "scf_cycles": int(getattr(mf, "cycles", -1)), "converged": bool(mf.converged),
            "device": device}


def reference_fock(mol, settings: SCFSettings, device: str, dm) -> np.ndarray:
    """One Fock build of density ``dm`` (n_ao, n_ao) at the reference settings (exact Coulomb and exchange, grid 3).

    On the CPU the two-electron integrals are contracted with ``dm`` as they are computed (pyscf's direct build,
    Schwarz- and density-screened) instead of being stored first: pyscf would hold all n_ao⁴/8 of them (0.85 GB at
    171 AOs, 3.9 GB at 250) for this single use. The same matrix to ~1e-13 Ha.
    """
    exact = mean_field(mol, replace(settings, density_fit=False, grid_level=REFERENCE_GRID_LEVEL), device)
    if device == "cpu":
        exact._is_mem_enough = lambda: False  # pyscf's switch between stored and direct integrals
    return _host(exact.get_fock(dm=dm))


def mean_field(mol, settings: SCFSettings, device: str, iterative: bool = False):
    """The pyscf (or gpu4pyscf) RKS/RHF object of ``settings``, not yet run.

    ``iterative`` (an SCF of many builds, on the CPU): the XC integrator keeps the AO values on the grid after the
    first build (:class:`~sciml.hamiltonian.scf.numint_cache.CachedNumInt`, up to :data:`SCF_AO_CACHE_MB`) and the
    density-fitting factors are built before the first cycle, where pyscf would otherwise recompute the three-centre
    integrals in every Coulomb build of a pure functional. The same converged H in about half the time
    (``benchmarks/hamiltonian_engine_speed.py``).
    """
    dft, scf = scf_modules(device)
    keep = iterative and device == "cpu"
    if settings.xc.lower() in ("hf", "rhf"):
        mf = scf.RHF(mol)
    else:
        mf = dft.RKS(mol)
        mf.xc = settings.xc
        mf.grids.level = settings.grid_level
        if keep:
            from sciml.hamiltonian.scf.numint_cache import CachedNumInt

            mf._numint = CachedNumInt(SCF_AO_CACHE_MB)
    if settings.density_fit:
        mf = mf.density_fit()
        if keep:
            mf.with_df.build()
    mf.conv_tol, mf.max_cycle, mf.verbose = settings.conv_tol, settings.max_cycle, 0
    return mf


def _host(matrix) -> np.ndarray:
    """A numpy array of a pyscf (numpy) or gpu4pyscf (cupy) matrix."""
    return np.asarray(matrix.get() if hasattr(matrix, "get") else matrix)


def scf_modules(device: str):
    """The ``(dft, scf)`` modules of ``device``: gpu4pyscf's for ``"gpu"``, pyscf's for ``"cpu"`` (the GPU path)."""
    if device == "gpu":
        from gpu4pyscf import dft, scf
    else:
        from pyscf import dft, scf
    return dft, scf


def scf_device(device: str = "auto") -> str:
    """``"gpu"`` when ``device`` allows it, gpu4pyscf imports and CUDA sees a GPU; else ``"cpu"``.

    ``device="gpu"`` without a usable GPU is a one-line RuntimeError; ``"cpu"`` never touches CUDA.
    """
    if device not in ("auto", "cpu", "gpu"):
        raise ValueError(f"unknown --device {device!r}; use auto, cpu or gpu")
    if device == "cpu":
        return "cpu"
    try:
        import cupy
        import gpu4pyscf  # noqa: F401

        ok = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # not installed, no driver, no device: all mean "no GPU path"
        ok = False
    if device == "gpu" and not ok:
        raise RuntimeError("--device gpu needs gpu4pyscf and a CUDA GPU (pip install gpu4pyscf-cuda12x); "
                           "use --device auto or cpu")
    return "gpu" if ok else "cpu"


def _part_path(out: Path, name: str, index: int) -> Path:
    return out / "parts" / name / f"{index:05d}.npz"


def _deeph_path(out: Path, name: str, index: int) -> Path:
    return out / "deeph" / name / f"{index:05d}"


def _done(out: Path, job: MoleculeJob, formats: tuple[str, ...]) -> bool:
    ok = _part_path(out, job.name, job.index).is_file()  # the part is always written (it feeds the merge)
    if "deeph" in formats:
        ok = ok and (_deeph_path(out, job.name, job.index) / "info.json").is_file()
    return ok


def run_job(job: MoleculeJob, settings: SCFSettings, out: str, formats: tuple[str, ...]) -> float:
    """Compute one conformer and write its outputs atomically; returns the SCF seconds (top-level: picklable)."""
    out_path = Path(out)
    res, meta = molecule_result(job, settings)
    if "deeph" in formats:
        from sciml.hamiltonian.data.deeph import write_deeph
        from sciml.hamiltonian.orbitals import OrbitalLayout
        from sciml.hamiltonian.structure import HamiltonianStructure

        layout = OrbitalLayout.from_ao_labels(job.numbers, res["ao_labels"])
        s = HamiltonianStructure.from_dense(job.numbers, job.positions, res["mats"], layout, meta)
        write_deeph(_deeph_path(out_path, job.name, job.index), s, layout)
    write_molecule_npz(_part_path(out_path, job.name, job.index), job, res, meta)
    return res["scf_seconds"]


def molecule_result(job: MoleculeJob, settings: SCFSettings, guess=None) -> tuple[dict, dict]:
    """SCF of one job (:func:`run_molecule_scf`) and the metadata stored with it; RuntimeError if unconverged.

    ``guess`` (optional) maps ``(numbers, positions, zeroth)`` to a starting density (pyscf order) or None (pyscf's
    ``minao`` guess), ``zeroth`` the molecule's :func:`zeroth_step_record`, built once for the guess and the stored
    H0; ``meta["guess"]`` says which one the SCF started from.
    """
    positions = np.asarray(job.positions)
    zeroth = zeroth_step_record(job.numbers, positions, settings) if guess is not None else None
    dm0 = guess(job.numbers, positions, zeroth) if guess is not None else None
    res = run_molecule_scf(job.numbers, positions, settings, dm0=dm0, zeroth=zeroth)
    if not res["converged"]:
        raise RuntimeError(f"{job.name} conformer {job.index}: SCF did not converge in {settings.max_cycle} cycles")
    meta = {"energy": res["energy"], "n_occupied": res["n_occupied"], "scf_seconds": res["scf_seconds"],
            "basis": settings.basis, "xc": settings.xc, "index": job.index, "name": job.name, "h0": settings.h0,
            "scf_cycles": res["scf_cycles"], "guess": "minao" if dm0 is None else "model"}
    return res, meta


def write_molecule_npz(path: str | Path, job: MoleculeJob, res: dict, meta: dict, compact: bool = False) -> Path:
    """One conformer's H, H0, S (pyscf order, Hartree) in the shared npz format, written atomically.

    ``compact``: zlib-compressed (lossless; :func:`sciml.hamiltonian.data.npz.write_arrays`).
    """
    from sciml.hamiltonian.data.npz import write_arrays

    mats = {k: v[None] for k, v in res["mats"].items()}
    return write_arrays(path, job.numbers, np.asarray(job.positions)[None], mats, res["ao_labels"], meta,
                        compress=compact)


def compute_molecule_npz(path: str | Path, job: MoleculeJob, settings: SCFSettings, guess=None,
                         compact: bool = False) -> dict:
    """SCF of one job written to ``path`` as a one-conformer npz (atomically); returns its metadata."""
    res, meta = molecule_result(job, settings, guess)
    write_molecule_npz(path, job, res, meta, compact)
    return {**meta, "device": res.get("device", "cpu")}


def settings_record(settings) -> dict:
    """The level of theory of ``settings`` (a dataclass) as stored in ``<name>.settings.json``.

    Threads and device are left out (where the SCF ran is recorded per molecule); the defaults ``density_fit``,
    ``final_build`` off and ``h0`` full are left out too, so folders made before those fields existed resume.
    """
    mine = json.loads(json.dumps(asdict(settings)))
    mine.pop("threads", None)
    mine.pop("device", None)
    for key in ("density_fit", "final_build"):
        if not mine.get(key, True):
            mine.pop(key)
    if mine.get("h0") == "full":
        mine.pop("h0")
    return mine


def check_settings(out: Path, name: str, settings) -> None:
    """Record ``settings`` (a dataclass) in ``<out>/<name>.settings.json``; refuse to resume with different ones."""
    path = Path(out) / f"{name}.settings.json"
    mine = settings_record(settings)
    if path.is_file():
        theirs = json.loads(path.read_text())
        if theirs != mine:
            raise ValueError(f"{out} already holds {name} data made with {theirs}, not {mine}; use another --out "
                             "or the same settings to resume")
    else:
        atomic_write_text(path, json.dumps(mine, indent=1) + "\n")


def generate_molecules(jobs: list[MoleculeJob], settings: SCFSettings, out: str | Path,
                       formats: tuple[str, ...] = ("npz",), workers: int = 1, progress: bool = True) -> dict:
    """Run all unfinished jobs (in ``workers`` processes), then merge parts into ``<out>/<name>.npz``.

    Returns ``{"computed": int, "skipped": int, "files": [paths]}``.
    """
    from sciml.hamiltonian.data.cheap import check_cheap
    from sciml.hamiltonian.data.npz import merge_npz

    check_cheap(settings)
    import_pyscf()
    out = Path(out)
    for name in sorted({j.name for j in jobs}):
        check_settings(out, name, settings)
    todo = [j for j in jobs if not _done(out, j, formats)]
    run_pool(run_job, todo, (settings, str(out), formats), workers, progress)
    files = []
    if "npz" in formats:
        for name in sorted({j.name for j in jobs}):
            idx = sorted(j.index for j in jobs if j.name == name)
            files.append(merge_npz([_part_path(out, name, i) for i in idx], out / f"{name}.npz"))
    if "deeph" in formats:
        files.extend(sorted({out / "deeph" / j.name for j in jobs}))
    return {"computed": len(todo), "skipped": len(jobs) - len(todo), "files": [str(f) for f in files]}


def run_pool(func, items: list, extra: tuple, workers: int, progress: bool, desc: str = "pyscf SCF") -> list:
    """``[func(item, *extra) for item in items]`` in ``workers`` spawned processes, with a progress bar.

    Returns the results in completion order (item order with one worker).
    """
    from tqdm.auto import tqdm

    bar = tqdm(total=len(items), desc=desc, unit="job", disable=not progress)
    out = []
    try:
        if workers <= 1:
            for item in items:
                out.append(func(item, *extra))
                bar.update()
            return out
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=_die_with_parent,
                                 initargs=(os.getpid(),)) as pool:
            for fut in as_completed([pool.submit(func, item, *extra) for item in items]):
                out.append(fut.result())
                bar.update()
        return out
    finally:
        bar.close()


def _die_with_parent(parent: int) -> None:
    """Worker initializer: end this worker when the run that started it ends (Linux ``PR_SET_PDEATHSIG``).

    Without it a killed run leaves its workers computing, and writing into the output folder, after it is gone.
    """
    import ctypes
    import signal

    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the run ended before the signal was armed
        os._exit(1)
