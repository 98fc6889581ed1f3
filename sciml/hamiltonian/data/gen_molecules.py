"""Molecular geometries for the Hamiltonian generator: the built-in MD17 set, xyz files, random conformers.

The built-in geometries are hand-built near-equilibrium structures (standard bond lengths and angles, not
optimised), the same kind of starting point as the shared data (``datasets/hamiltonian_molecules/README.md``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sciml.hamiltonian.data.smiles import SMILES_LARGE, SMILES_ORGANIC, smiles_molecule

__all__ = ["G2_ORGANIC", "MD17", "S22_MONOMERS", "builtin_molecule", "conformer_sigmas", "displaced_conformers",
           "molecule_seed", "organic_split", "read_xyz_frames", "resolve_molecules"]

_WATER = [("O", 0.0, 0.0, 0.117), ("H", 0.0, 0.757, -0.469), ("H", 0.0, -0.757, -0.469)]
_ETHANOL = [("C", 1.1879, -0.3829, 0.0), ("C", 0.0, 0.5526, 0.0), ("O", -1.1867, -0.2472, 0.0),
            ("H", -1.9237, 0.3850, 0.0), ("H", 2.1181, 0.1829, 0.0), ("H", 1.1557, -1.0193, 0.8850),
            ("H", 1.1557, -1.0193, -0.8850), ("H", 0.0606, 1.1948, 0.8856), ("H", 0.0606, 1.1948, -0.8856)]
_SYMBOLS = {"H": 1, "C": 6, "N": 7, "O": 8}


def _planar_ring(symbols, radius, substituents):
    """Six-membered planar ring (regular hexagon, ``radius`` Å) with one radial substituent per listed atom.

    ``substituents``: ring index -> (symbol, bond length Å). Returns [(symbol, x, y, z)].
    """
    atoms = []
    for k, s in enumerate(symbols):
        a = np.pi / 3 * k
        atoms.append((s, radius * np.cos(a), radius * np.sin(a), 0.0))
    for k, (s, d) in substituents.items():
        a = np.pi / 3 * k
        atoms.append((s, (radius + d) * np.cos(a), (radius + d) * np.sin(a), 0.0))
    return atoms


def _malondialdehyde():
    """Enol form: quasi-ring O1=C1-C2=C3-O2-H (hydrogen bond H...O1), built bond by bond in the plane."""
    ring = ["O", "C", "C", "C", "O"]
    bonds = [1.24, 1.42, 1.37, 1.32]  # O1=C1, C1-C2, C2=C3, C3-O2 (Å)
    interior = [124.0, 119.0, 124.0]  # angles at C1, C2, C3 (degrees)
    pts, heading = [np.zeros(2)], 0.0
    for k, d in enumerate(bonds):
        pts.append(pts[-1] + d * np.array([np.cos(heading), np.sin(heading)]))
        if k < len(interior):
            heading += np.radians(180.0 - interior[k])
    atoms = [(s, *p, 0.0) for s, p in zip(ring, pts, strict=True)]
    o2 = pts[4]
    heading += np.radians(180.0 - 106.0)  # C3-O2-H angle
    atoms.append(("H", *(o2 + 1.00 * np.array([np.cos(heading), np.sin(heading)])), 0.0))
    for k, d in ((1, 1.10), (2, 1.08), (3, 1.09)):  # H on C1, C2, C3 along the external bisector
        out = -(_unit(pts[k - 1] - pts[k]) + _unit(pts[k + 1] - pts[k]))
        atoms.append(("H", *(pts[k] + d * _unit(out)), 0.0))
    return atoms


def _unit(v):
    return v / np.linalg.norm(v)


# uracil: ring N1 C2 N3 C4 C5 C6 (bonds ~1.38-1.40 Å); O on C2 and C4, H on N1, N3, C5, C6
_URACIL = _planar_ring(["N", "C", "N", "C", "C", "C"], 1.39,
                       {0: ("H", 1.01), 1: ("O", 1.22), 2: ("H", 1.01), 3: ("O", 1.22), 4: ("H", 1.08),
                        5: ("H", 1.08)})

#: built-in molecules (symbol, x, y, z in Å)
MD17 = {"water": _WATER, "ethanol": _ETHANOL, "malondialdehyde": _malondialdehyde(), "uracil": _URACIL}


#: closed-shell H/C/N/O molecules of ASE's G2 collection (``ase.collections.g2``, experimental geometries), by size
G2_ORGANIC = (
    "CO", "H2", "N2", "CH2_s1A1d", "CO2", "H2O", "HCN", "N2O", "O3", "C2H2", "H2CO", "H2O2", "NCCN", "NH3", "CH4",
    "H2CCO", "HCOOH", "C2H4", "CH3CN", "CH3OH", "N2H4", "OCHCHO", "C3H4_C2v", "C3H4_C3v", "C3H4_D2d", "CH2OCH2",
    "CH3CHO", "CH3NO2", "CH3ONO", "H2CCHCN", "H3CNH2", "C2H6", "CH2NHCH2", "CH3COOH", "HCOOCH3", "C3H6_Cs",
    "C3H6_D3h", "C4H4O", "CH3CH2OH", "CH3CONH2", "CH3OCH3", "2-butyne", "C2H6NH", "C4H4NH", "CH3CH2NH2", "CH3COCH3",
    "bicyclobutane", "butadiene", "cyclobutene", "methylenecyclopropane", "C3H8", "C5H5N", "C2H6CHOH", "C6H6",
    "CH3CH2OCH3", "cyclobutane", "isobutene", "C3H9N", "C5H8", "isobutane", "trans-butane")
#: aromatic H/C/N/O monomers of ASE's S22 complexes (``ase.collections.s22``, MP2/CCSD(T) geometries): name ->
#: (complex, monomer 0 or 1). Uracil (an MD17 hold-out) and thymine (5-methyluracil, the same scaffold) are left out.
S22_MONOMERS = {"2-pyridone": ("2-pyridoxine_2-aminopyridine_complex", 0),
                "2-aminopyridine": ("2-pyridoxine_2-aminopyridine_complex", 1),
                "adenine": ("Adenine-thymine_Watson-Crick_complex", 0), "pyrazine": ("Pyrazine_dimer", 0),
                "indole": ("Indole-benzene_complex_stack", 1), "phenol": ("Phenol_dimer", 0)}
#: MD17 molecules that a general model must never train on (its held-out test); water and ethanol may be trained on
MD17_HOLDOUT = ("malondialdehyde", "uracil")
#: molecule-list aliases of ``--molecule`` (see :func:`organic_split`)
ALIASES = ("g2-organic", "g2-train", "g2-holdout", "md17-holdout", "s22-monomers", "smiles-organic", "smiles-large")


def organic_split(seed: int = 0, n_holdout: int = 8) -> tuple[list[str], list[str]]:
    """Seeded molecule-level split of :data:`G2_ORGANIC`: (training molecules, held-out molecules).

    Water and ethanol always train (the MD17 pair allowed in training); ``n_holdout`` of the others, drawn with
    ``default_rng(seed)``, are never seen in any conformer.
    """
    pool = [m for m in G2_ORGANIC if m not in ("H2O", "CH3CH2OH")]
    held = set(np.random.default_rng(seed).choice(pool, size=n_holdout, replace=False).tolist())
    return [m for m in G2_ORGANIC if m not in held], [m for m in G2_ORGANIC if m in held]


def resolve_molecules(spec: str) -> list[str]:
    """Molecule names of a ``--molecule`` value: comma-separated names and/or aliases (:data:`ALIASES`)."""
    train, held = organic_split()
    table = {"g2-organic": list(G2_ORGANIC), "g2-train": train, "g2-holdout": held,
             "md17-holdout": list(MD17_HOLDOUT), "s22-monomers": list(S22_MONOMERS),
             "smiles-organic": list(SMILES_ORGANIC), "smiles-large": list(SMILES_LARGE)}
    names = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        names += table.get(part, [part])
    for name in names:
        _check_name(name)
    return list(dict.fromkeys(names))


def _check_name(name: str) -> None:
    if not any(name in table for table in (MD17, G2_ORGANIC, S22_MONOMERS, SMILES_ORGANIC, SMILES_LARGE)):
        raise ValueError(f"unknown molecule {name!r}; built-in: {', '.join(MD17)}, the G2 names of "
                         f"{', '.join(G2_ORGANIC[:6])}, ... (G2_ORGANIC), the S22 monomers "
                         f"{', '.join(S22_MONOMERS)}, the SMILES molecules {', '.join(list(SMILES_ORGANIC)[:4])}, "
                         f"... (SMILES_ORGANIC), {', '.join(list(SMILES_LARGE)[:2])}, ... (SMILES_LARGE), aliases "
                         f"{', '.join(ALIASES)} (or pass --xyz FILE)")


def molecule_seed(seed: int, name: str) -> int:
    """Per-molecule conformer seed for multi-molecule datasets (different molecules, independent displacements)."""
    import zlib

    return int(np.random.SeedSequence([seed, zlib.crc32(name.encode())]).generate_state(1)[0])


def builtin_molecule(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Atomic numbers (n,) and positions (n, 3) Å of a built-in molecule (MD17 set, G2 organic, S22 monomer, SMILES)."""
    _check_name(name)
    if name in SMILES_ORGANIC or name in SMILES_LARGE:
        return smiles_molecule(name)
    if name in MD17:
        atoms = MD17[name]
        return (np.array([_SYMBOLS[a[0]] for a in atoms], dtype=np.int64),
                np.array([a[1:] for a in atoms], dtype=np.float64))
    if name in S22_MONOMERS:
        from ase.collections import s22
        from ase.data.s22 import get_number_of_dimer_atoms

        complex_name, part = S22_MONOMERS[name]
        n_first = get_number_of_dimer_atoms(complex_name)[0]
        atoms = s22[complex_name]
        atoms = atoms[:n_first] if part == 0 else atoms[n_first:]
        return atoms.numbers.astype(np.int64), atoms.positions.astype(np.float64)
    from ase.collections import g2

    atoms = g2[name]
    return atoms.numbers.astype(np.int64), atoms.positions.astype(np.float64)


def displaced_conformers(positions: np.ndarray, n: int, sigma: float, seed: int, start: int = 0,
                         sigma_max: float | None = None, rotate: bool = False) -> np.ndarray:
    """Conformers ``start .. start+n-1``: every coordinate displaced by N(0, σ²) Å, shape (n, n_atoms, 3).

    Conformer k uses its own generator ``default_rng([seed, k])``, so it does not depend on ``n`` (resuming or
    extending a dataset reproduces the same geometries). By default σ = ``sigma`` for every conformer. With
    ``sigma_max``, conformer k draws its own σ uniformly in ``[sigma, sigma_max]`` (a broader, mixed set); with
    ``rotate``, the displaced conformer is turned by a uniformly random rotation about its centroid (random
    orientation). Both draws come after the displacement draw, so the default conformers are unchanged.
    """
    if sigma < 0:
        raise ValueError(f"--sigma must be >= 0 Å, got {sigma}")
    if sigma_max is not None and sigma_max < sigma:
        raise ValueError(f"--sigma-max ({sigma_max} Å) must be >= --sigma ({sigma} Å)")
    return np.stack([_conformer(positions, np.random.default_rng([seed, k]), sigma, sigma_max, rotate)
                     for k in range(start, start + n)])


def conformer_sigmas(n_atoms: int, n: int, sigma: float, seed: int, start: int = 0,
                     sigma_max: float | None = None) -> np.ndarray:
    """The σ (Å) of conformers ``start .. start+n-1`` of :func:`displaced_conformers` (same draws), shape (n,)."""
    if sigma_max is None:
        return np.full(n, float(sigma))
    out = []
    for k in range(start, start + n):
        rng = np.random.default_rng([seed, k])
        rng.normal(size=(n_atoms, 3))
        out.append(rng.uniform(sigma, sigma_max))
    return np.asarray(out)


def _conformer(positions: np.ndarray, rng: np.random.Generator, sigma: float, sigma_max: float | None,
               rotate: bool) -> np.ndarray:
    step = rng.normal(size=positions.shape)
    s = sigma if sigma_max is None else rng.uniform(sigma, sigma_max)
    out = positions + s * step
    if rotate:
        from scipy.spatial.transform import Rotation

        centre = out.mean(axis=0)
        out = (out - centre) @ Rotation.random(random_state=rng).as_matrix().T + centre
    return out


MIN_DISTANCE = 0.3  # Å; the shortest bond (H2) is 0.74 Å, so closer atoms are duplicates or unit mistakes


def check_geometry(positions: np.ndarray, path, frame: int = 0) -> None:
    """Raise ``ValueError`` for non-finite coordinates or two atoms closer than ``MIN_DISTANCE`` Å."""
    if not np.isfinite(positions).all():
        raise ValueError(f"{path}: frame {frame} has non-finite coordinates (NaN or inf); fix the file")
    d = np.linalg.norm(positions[:, None] - positions[None], axis=-1) + np.eye(len(positions)) * 1e9
    i, j = np.unravel_index(np.argmin(d), d.shape)
    if d[i, j] < MIN_DISTANCE:
        raise ValueError(f"{path}: frame {frame}: atoms {i + 1} and {j + 1} are {d[i, j]:.3f} Å apart "
                         f"(< {MIN_DISTANCE} Å); remove duplicated atoms or check the units are Å")


def read_xyz_frames(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read a (multi-frame) xyz file: atomic numbers (n_atoms,) and positions (n_frames, n_atoms, 3) in Å.

    Raises
    ------
    ValueError
        If the file cannot be parsed or frames differ in their atoms.

    """
    import ase.io

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"xyz file {path} does not exist")
    try:
        frames = ase.io.read(path, index=":", format="extxyz")
    except KeyError as err:
        raise ValueError(f"{path}: unknown element symbol {err}; use chemical symbols such as H, C, O") from None
    except Exception as err:
        raise ValueError(f"{path} is not a readable xyz file ({type(err).__name__}: {err}); expected lines "
                         "'n_atoms', 'comment', then 'Symbol x y z' in Å") from err
    if not frames:
        raise ValueError(f"{path} holds no frames")
    numbers = frames[0].numbers.astype(np.int64)
    if len(numbers) == 0:
        raise ValueError(f"{path}: the first frame has no atoms; give 'n_atoms' > 0 lines of 'Symbol x y z'")
    for k, f in enumerate(frames):
        check_geometry(f.positions, path, k)
        if not np.array_equal(f.numbers, numbers):
            raise ValueError(f"{path}: frame {k} has atoms {f.get_chemical_formula()}, frame 0 "
                             f"{frames[0].get_chemical_formula()}; a trajectory must keep the same atoms in order")
    return numbers, np.stack([f.positions for f in frames]).astype(np.float64)
