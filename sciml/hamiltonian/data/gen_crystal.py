"""Periodic Hamiltonian data with pyscf.pbc: KS-DFT on a k-mesh, H(R)/H0(R) by Fourier transform, exact S(R).

Recipe (``datasets/hamiltonian_crystals/README.md``): SCF (KRKS, GTH pseudopotentials, GTH basis) on
``kmesh``; then non-SCF Fock builds on the denser ``fock_kmesh`` -- H from the SCF density, H0 from the minao
initial-guess density (superposition of atomic densities) -- Fourier-transformed onto Wigner-Seitz atom-pair
blocks within ``cutoff``; S(R) computed exactly in real space (``gto.intor_cross``) for the same blocks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sciml.hamiltonian.orbitals import OrbitalLayout
from sciml.hamiltonian.periodic import band_energies, fourier_blocks
from sciml.hamiltonian.structure import HamiltonianStructure

__all__ = ["CRYSTALS", "GENERATOR_KEYS", "CrystalSettings", "builtin_crystal", "crystal_zeroth_step",
           "exact_pair_blocks", "generate_crystals", "generator_settings", "make_cell", "run_crystal_scf"]

BOHR = 0.52917721092  # Å, pyscf's value
#: built-in diamond-structure crystals: element Z and cubic lattice constant (Å)
CRYSTALS = {"Si": (14, 5.431), "C": (6, 3.567)}
#: generator settings a crystal model stores (``CrystalSettings`` fields read from the training meta)
GENERATOR_KEYS = ("xc", "basis", "pseudo", "kmesh", "fock_kmesh", "cutoff", "ke_cutoff")


@dataclass(frozen=True)
class CrystalSettings:
    """Level of theory and sampling of the periodic generator (lengths in Å, energies in Hartree)."""

    xc: str = "pbe"
    basis: str = "gth-szv"
    pseudo: str = "gth-pbe"
    kmesh: tuple[int, int, int] = (2, 2, 2)
    fock_kmesh: tuple[int, int, int] = (6, 6, 6)
    cutoff: float | None = 14.0
    conv_tol: float = 1e-10
    ke_cutoff: float | None = None
    exact_overlap: bool = True  # S(R) by real-space integrals; False: Fourier of S(k) on fock_kmesh (mesh-exact)
    threads: int = 1
    max_cycle: int = 100


def generator_settings(structures) -> dict:
    """The level of theory / sampling shared by all crystals (error naming the first that differs)."""
    first = {k: structures[0].meta.get(k) for k in GENERATOR_KEYS}
    for s in structures[1:]:
        mine = {k: s.meta.get(k) for k in GENERATOR_KEYS}
        if mine != first:
            raise ValueError(f"{s.meta.get('source')}: generated with {mine}, {structures[0].meta.get('source')} "
                             f"with {first}; fit one model per level of theory")
    return first


def builtin_crystal(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Primitive diamond cell: numbers (2,), positions (2, 3) Å, lattice (3, 3) Å (rows)."""
    if name not in CRYSTALS:
        raise ValueError(f"unknown crystal {name!r}; built-in: {', '.join(CRYSTALS)}")
    z, a = CRYSTALS[name]
    lattice = a / 2 * np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    return np.array([z, z]), np.array([[0.0, 0.0, 0.0], [a / 4, a / 4, a / 4]]), lattice


def make_cell(numbers, positions, lattice, settings: CrystalSettings):
    """A built ``pyscf.pbc.gto.Cell`` (Å input)."""
    from pyscf.pbc import gto

    kwargs = {"ke_cutoff": settings.ke_cutoff} if settings.ke_cutoff else {}
    return gto.M(atom=[(int(z), tuple(p)) for z, p in zip(numbers, positions, strict=True)], a=np.asarray(lattice),
                 basis=settings.basis, pseudo=settings.pseudo, unit="Angstrom", verbose=0, **kwargs)


def exact_pair_blocks(cell, keys, intor: str = "int1e_ovlp") -> dict[tuple, np.ndarray]:
    """Real-space one-electron integrals <i, cell 0 | op | j, cell R> for DeepH keys, pyscf order (exact, no FFT)."""
    from pyscf import gto

    coords = cell.atom_coords()  # Bohr
    lat = cell.lattice_vectors()  # Bohr, rows
    symbols = [cell.atom_symbol(a) for a in range(cell.natm)]

    def mol_at(shift):
        return gto.M(atom=[(s, c + shift) for s, c in zip(symbols, coords, strict=True)], basis=cell._basis,
                     unit="Bohr", spin=None, verbose=0)

    slices = cell.aoslice_by_atom()
    off = np.concatenate([slices[:, 2], slices[-1:, 3]])
    home = mol_at(np.zeros(3))
    out = {}
    for r in sorted({k[:3] for k in keys}):
        full = gto.intor_cross(intor, home, mol_at(np.asarray(r) @ lat))
        for k in (k for k in keys if k[:3] == r):
            i, j = k[3], k[4]
            out[k] = full[off[i]:off[i + 1], off[j]:off[j + 1]]
    return out


def _crystal_mf(cell, settings: CrystalSettings):
    """Unconverged ``KRKS`` on ``settings.kmesh`` (xc, tolerances set; no SCF run)."""
    from pyscf.pbc import dft

    mf = dft.KRKS(cell, cell.make_kpts(settings.kmesh))
    mf.xc, mf.conv_tol, mf.max_cycle, mf.verbose = settings.xc, settings.conv_tol, settings.max_cycle, 0
    return mf


#: band k-points per non-SCF Fock build: pyscf's memory grows with the k-points of one call, so a dense mesh is
#: built in chunks (same matrices up to rounding)
BAND_CHUNK = 27


def _veff_on_band(mf, cell, dm, band) -> np.ndarray:
    """``veff(dm)`` at the band k-points ``(n_k, n_ao, n_ao)``, in chunks of :data:`BAND_CHUNK` k-points."""
    return np.concatenate([np.asarray(mf.get_veff(cell, dm, kpts=mf.kpts, kpts_band=band[i:i + BAND_CHUNK]))
                           for i in range(0, len(band), BAND_CHUNK)])


def _real_space_blocks(cell, layout: OrbitalLayout, mf, dms: dict, positions, lattice, settings: CrystalSettings
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """H(R) blocks of ``hcore + veff(dm)`` per named density (Fock on ``fock_kmesh``, Fourier), plus S(R).

    Blocks in e3nn order, Hartree; S exact (real space) or Fourier. Returns ``(numbers, pos, lat, blocks)``.
    """
    from sciml.hamiltonian.orbitals import atomic_numbers

    band = cell.make_kpts(settings.fock_kmesh)
    hcore = mf.get_hcore(cell, band)
    fock = {name: hcore + _veff_on_band(mf, cell, dm, band) for name, dm in dms.items()}
    pos, lat = np.asarray(positions, dtype=np.float64), np.asarray(lattice, dtype=np.float64)
    numbers = atomic_numbers(cell)
    off = layout.atom_offsets(numbers)
    raw = {name: fourier_blocks(np.asarray(hk), settings.fock_kmesh, pos, lat, off, settings.cutoff)
           for name, hk in fock.items()}
    if settings.exact_overlap:
        raw["S"] = exact_pair_blocks(cell, list(raw["H0"]))
    else:
        sk = np.asarray(cell.pbc_intor("int1e_ovlp", hermi=1, kpts=band))
        raw["S"] = fourier_blocks(sk, settings.fock_kmesh, pos, lat, off, settings.cutoff)
    maps = [layout.atom_transform(z) for z in numbers]
    blocks = {name: {k: maps[k[3]] @ b @ maps[k[4]].T for k, b in bl.items()} for name, bl in raw.items()}
    return numbers, pos, lat, blocks


def crystal_zeroth_step(numbers, positions, lattice, settings: CrystalSettings
                        ) -> tuple[HamiltonianStructure, OrbitalLayout]:
    """H0(R) (Fock of the minao density, no SCF) and S(R) blocks of a crystal, as in :func:`run_crystal_scf`.

    ``meta`` holds ``n_occupied`` (doubly occupied bands) and the settings used.
    """
    from pyscf import lib

    lib.num_threads(settings.threads)
    cell = make_cell(numbers, positions, lattice, settings)
    layout = OrbitalLayout.from_pyscf_mol(cell)
    mf = _crystal_mf(cell, settings)
    numbers, pos, lat, blocks = _real_space_blocks(cell, layout, mf, {"H0": mf.get_init_guess(key="minao")},
                                                   positions, lattice, settings)
    meta = {"n_occupied": int(cell.nelectron // 2), "kmesh": list(settings.kmesh),
            "fock_kmesh": list(settings.fock_kmesh), "cutoff": settings.cutoff, "basis": settings.basis,
            "pseudo": settings.pseudo, "xc": settings.xc, "ke_cutoff": settings.ke_cutoff}
    return HamiltonianStructure(numbers, pos, lat, blocks, meta), layout


def run_crystal_scf(numbers, positions, lattice, settings: CrystalSettings) -> tuple[HamiltonianStructure,
                                                                                   OrbitalLayout]:
    """KRKS on ``kmesh``, Fock builds on ``fock_kmesh``; blocks H, H0 (Fourier) and S (exact), e3nn order.

    ``meta`` holds ``energy`` (Hartree per cell), ``n_occupied`` (doubly occupied bands), ``scf_seconds``,
    ``kmesh``, ``fock_kmesh``, ``cutoff``, ``basis``, ``pseudo``, ``xc``, ``ke_cutoff`` and, for checks, the SCF
    mesh's fractional ``kpts`` and ``mo_energy`` (Hartree), and pyscf's band energies ``check_bands`` (Hartree) at
    off-mesh fractional ``check_kpts`` (L, X and three random points) from the SCF density.
    """
    from pyscf import lib

    lib.num_threads(settings.threads)
    cell = make_cell(numbers, positions, lattice, settings)
    layout = OrbitalLayout.from_pyscf_mol(cell)
    mf = _crystal_mf(cell, settings)
    start = time.perf_counter()
    mf.kernel()
    seconds = time.perf_counter() - start
    if not mf.converged:
        raise RuntimeError(f"periodic SCF did not converge in {settings.max_cycle} cycles")
    dms = {"H": mf.make_rdm1(), "H0": mf.get_init_guess(key="minao")}
    numbers, pos, lat, blocks = _real_space_blocks(cell, layout, mf, dms, positions, lattice, settings)
    check = np.vstack([[[0.5, 0.5, 0.5], [0.5, 0.0, 0.5]], np.random.default_rng(0).random((3, 3))])
    ck = cell.get_abs_kpts(check)
    hk = mf.get_hcore(cell, ck) + mf.get_veff(cell, mf.make_rdm1(), kpts=mf.kpts, kpts_band=ck)
    check_bands = band_energies(np.asarray(hk), np.asarray(cell.pbc_intor("int1e_ovlp", hermi=1, kpts=ck)))
    meta = {"energy": float(mf.e_tot), "n_occupied": int(cell.nelectron // 2), "scf_seconds": seconds,
            "kmesh": list(settings.kmesh), "fock_kmesh": list(settings.fock_kmesh), "cutoff": settings.cutoff,
            "basis": settings.basis, "pseudo": settings.pseudo, "xc": settings.xc, "ke_cutoff": settings.ke_cutoff,
            "kpts": cell.get_scaled_kpts(mf.kpts).tolist(), "mo_energy": np.asarray(mf.mo_energy).tolist(),
            "check_kpts": check.tolist(), "check_bands": check_bands.tolist()}
    return HamiltonianStructure(numbers, pos, lat, blocks, meta), layout


def run_crystal_job(index: int, name: str, positions: np.ndarray, settings: CrystalSettings, out: str) -> None:
    """One displaced structure of built-in crystal ``name``, written atomically as a DeepH folder."""
    from sciml.hamiltonian.data.deeph import write_deeph

    numbers, _, lattice = builtin_crystal(name)
    structure, layout = run_crystal_scf(numbers, positions, lattice, settings)
    structure.meta |= {"name": name, "index": index}
    write_deeph(Path(out) / "deeph" / name / f"{index:05d}", structure, layout)


def generate_crystals(name: str, n: int, sigma: float, seed: int, settings: CrystalSettings, out: str | Path,
                      workers: int = 1, progress: bool = True) -> dict:
    """Structures 0..n-1 of a built-in crystal (atoms displaced by N(0, sigma²) Å, lattice fixed), resumable.

    Returns ``{"computed", "skipped", "folder"}``; structure k is ``<out>/deeph/<name>/<k:05d>``.
    """
    from sciml.hamiltonian.data.gen_molecules import displaced_conformers
    from sciml.hamiltonian.data.generate import check_settings, run_pool
    from sciml.hamiltonian.scf.h0 import import_pyscf

    import_pyscf()
    _, base, _ = builtin_crystal(name)
    out = Path(out)
    check_settings(out, name, settings)
    todo = [k for k in range(n) if not (out / "deeph" / name / f"{k:05d}" / "info.json").is_file()]
    jobs = [(k, displaced_conformers(base, 1, sigma, seed, start=k)[0]) for k in todo]
    run_pool(_crystal_job, jobs, (name, settings, str(out)), workers, progress, desc=f"pyscf.pbc {name}")
    return {"computed": len(todo), "skipped": n - len(todo), "folder": str(out / "deeph" / name)}


def _crystal_job(job, name, settings, out):
    run_crystal_job(job[0], name, job[1], settings, out)
