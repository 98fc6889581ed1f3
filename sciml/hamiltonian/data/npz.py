"""The shared npz format of molecular Hamiltonians (``docs/formats.md``).

One file per molecule, all conformers stacked; matrices in **pyscf** AO order, Hartree; positions in Å:
``atomic_numbers (n_atoms,)``, ``positions_angstrom (n_conf, n_atoms, 3)``, ``hamiltonian``, ``hamiltonian_0``,
``overlap`` (each (n_conf, n_ao, n_ao)), ``energy_hartree (n_conf,)``, ``n_occupied ()``, ``scf_seconds (n_conf,)``,
``ao_labels (n_ao,)``, and optional scalars ``basis``, ``xc``, ``units``. Reading converts to e3nn order once.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sciml.core.io.atomic import atomic_open
from sciml.hamiltonian.orbitals import OrbitalLayout
from sciml.hamiltonian.structure import HamiltonianStructure

__all__ = ["ARRAYS", "default_ao_labels", "merge_layouts", "merge_npz", "read_npz", "read_npz_folder", "write_arrays",
           "write_npz"]

#: block name -> npz array
ARRAYS = {"H": "hamiltonian", "H0": "hamiltonian_0", "S": "overlap"}
_UNITS = "positions in Angstrom; hamiltonian, hamiltonian_0, overlap, energy in Hartree"
_FIX = "regenerate with sciml data hamiltonian"


def read_npz(path: str | Path, names=("H", "H0", "S")) -> tuple[list[HamiltonianStructure], OrbitalLayout]:
    """Read every conformer of one npz file into e3nn-order structures.

    Parameters
    ----------
    path : str or Path
        npz file in the shared format.
    names : tuple of str
        Matrices to load (subset of ``"H", "H0", "S"``); each must be present.

    Returns
    -------
    structures : one :class:`HamiltonianStructure` per conformer, ``meta`` with ``n_occupied``, ``energy``
        (Hartree), ``scf_seconds``, ``basis``, ``xc``, ``source`` (path) and ``index``.
    layout : the orbital layout parsed from ``ao_labels``.

    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Hamiltonian file {path} does not exist; {_FIX}")
    try:
        data = dict(np.load(path, allow_pickle=False))
    except Exception as err:
        raise ValueError(f"file {path} is not a readable npz archive ({err}); {_FIX}") from err
    for key in ("atomic_numbers", "positions_angstrom", "ao_labels", *(ARRAYS[n] for n in names)):
        if key not in data:
            raise ValueError(f"file {path} has no {key!r} array; {_FIX}")
    numbers = data["atomic_numbers"].astype(np.int64)
    pos = np.asarray(data["positions_angstrom"], dtype=np.float64)
    if pos.ndim != 3 or pos.shape[1:] != (len(numbers), 3):
        raise ValueError(f"file {path}: positions_angstrom has shape {pos.shape}, expected (n_conf, "
                         f"{len(numbers)}, 3)")
    layout = OrbitalLayout.from_ao_labels(numbers, data["ao_labels"])
    n_ao, n_conf = int(layout.atom_offsets(numbers)[-1]), pos.shape[0]
    mats = {}
    for name in names:
        m = np.asarray(data[ARRAYS[name]], dtype=np.float64)
        if m.shape != (n_conf, n_ao, n_ao):
            raise ValueError(f"file {path}: {ARRAYS[name]} has shape {m.shape}, expected ({n_conf}, {n_ao}, {n_ao})"
                             " from positions_angstrom and ao_labels")
        mats[name] = layout.to_e3nn(m, numbers)
    structures = [HamiltonianStructure.from_dense(numbers, pos[c], {n: m[c] for n, m in mats.items()}, layout,
                                                  _meta(data, c, path), order="e3nn")
                  for c in range(n_conf)]
    return structures, layout


def merge_layouts(layouts: list[OrbitalLayout], sources: list) -> OrbitalLayout:
    """One layout covering every element; an element with different shells in two files is a ValueError."""
    shells: dict[int, tuple[int, ...]] = {}
    where: dict[int, str] = {}
    for layout, source in zip(layouts, sources, strict=True):
        for z, ls in layout.shells.items():
            if z in shells and shells[z] != ls:
                raise ValueError(f"{source}: element Z={z} has shells {ls}, {where[z]} has {shells[z]}; every file "
                                 "of a folder must use one basis")
            shells.setdefault(z, ls)
            where.setdefault(z, str(source))
    return OrbitalLayout(shells)


def read_npz_folder(folder: str | Path, names=("H", "H0", "S")) -> tuple[list[HamiltonianStructure], OrbitalLayout]:
    """Read every ``*.npz`` of ``folder``: one molecule per file, one layout for all.

    Made e.g. by ``sciml data hamiltonian --molecule g2-train``; ``meta["molecule"]`` is the file stem. All files
    must share basis, functional and H0 method.
    """
    paths = sorted(Path(folder).glob("*.npz"))
    if not paths:
        raise FileNotFoundError(f"{folder} holds no .npz files; {_FIX} --molecule NAMES --out {folder}")
    structures, layouts = [], []
    for path in paths:
        part, layout = read_npz(path, names)
        for s in part:
            s.meta["molecule"] = path.stem
        structures += part
        layouts.append(layout)
    for key in ("basis", "xc", "h0"):
        seen = {str(s.meta.get(key)) for s in structures}
        if len(seen) > 1:
            raise ValueError(f"{folder}: files differ in {key} ({', '.join(sorted(seen))}); keep one level of theory "
                             "per folder")
    return structures, merge_layouts(layouts, paths)


def _meta(data: dict, c: int, path: Path) -> dict:
    meta = {"source": str(path), "index": c}
    if "n_occupied" in data:
        meta["n_occupied"] = int(np.asarray(data["n_occupied"]).reshape(-1)[0])
    for key, name in (("energy_hartree", "energy"), ("scf_seconds", "scf_seconds")):
        if key in data:
            meta[name] = float(np.asarray(data[key]).reshape(-1)[c])
    for key in ("basis", "xc"):
        if key in data:
            meta[key] = str(data[key])
    meta["h0"] = str(data["h0_method"]) if "h0_method" in data else "full"  # files without the field: full
    return meta


def write_npz(path: str | Path, structures: list[HamiltonianStructure], layout: OrbitalLayout,
              ao_labels=None) -> Path:
    """Write molecules (same atoms, same order) to one npz in the shared format, atomically.

    Matrices are converted back to pyscf order. ``ao_labels`` defaults to labels built from the layout
    (``"<atom> <symbol> <l-letter><component>"``); pass pyscf's ``mol.ao_labels()`` to keep its exact spelling.
    """
    if not structures:
        raise ValueError("write_npz needs at least one structure")
    numbers = structures[0].numbers
    for s in structures:
        if s.is_periodic or not np.array_equal(s.numbers, numbers):
            raise ValueError("write_npz stores conformers of one molecule: same atoms, no lattice "
                             f"(got {s.meta.get('source', 'a structure')} with atoms {s.numbers.tolist()})")
    names = [n for n in ARRAYS if all(n in s.blocks for s in structures)]
    mats = {n: np.stack([s.to_dense(n, layout, order="pyscf") for s in structures]) for n in names}
    metas = [s.meta for s in structures]
    meta = {**metas[0], "energy": [m.get("energy", np.nan) for m in metas],
            "scf_seconds": [m.get("scf_seconds", np.nan) for m in metas]}
    labels = ao_labels if ao_labels is not None else default_ao_labels(layout, numbers)
    return write_arrays(path, numbers, np.stack([s.positions for s in structures]), mats, labels, meta)


def write_arrays(path: str | Path, numbers, positions: np.ndarray, mats: dict[str, np.ndarray], ao_labels,
                 meta: dict, compress: bool = False) -> Path:
    """Write raw arrays in the shared format, atomically (matrices already in pyscf order, Hartree).

    ``positions`` (n_conf, n_atoms, 3) Å; ``mats`` name -> (n_conf, n_ao, n_ao); ``meta`` with ``energy`` and
    ``scf_seconds`` (scalar or (n_conf,)), ``n_occupied``, ``basis``, ``xc``, optionally ``scf_cycles`` and
    ``guess`` (the SCF's starting density: ``"minao"`` or ``"model"``; scalar or (n_conf,)). ``compress``: a
    zlib-compressed archive (``np.savez_compressed``; lossless, read the same way).
    """
    n_conf = len(positions)
    arrays = {"atomic_numbers": np.asarray(numbers, dtype=np.int64),
              "positions_angstrom": np.asarray(positions, dtype=np.float64), "ao_labels": np.asarray(ao_labels)}
    for name, m in mats.items():
        arrays[ARRAYS[name]] = np.asarray(m, dtype=np.float64)
    for key, name in (("energy_hartree", "energy"), ("scf_seconds", "scf_seconds")):
        arrays[key] = np.broadcast_to(np.asarray(meta.get(name, np.nan), dtype=np.float64), (n_conf,)).copy()
    arrays["n_occupied"] = np.asarray(int(meta.get("n_occupied", -1)))
    for key in ("basis", "xc"):
        if key in meta:
            arrays[key] = np.asarray(str(meta[key]))
    if "scf_cycles" in meta:
        arrays["scf_cycles"] = np.broadcast_to(np.asarray(meta["scf_cycles"], dtype=np.int64), (n_conf,)).copy()
    if "guess" in meta:
        arrays["scf_guess"] = np.broadcast_to(np.asarray(meta["guess"], dtype=str), (n_conf,)).copy()
    if meta.get("h0", "full") != "full":
        arrays["h0_method"] = np.asarray(str(meta["h0"]))
    arrays["units"] = np.asarray(_UNITS)
    path = Path(path)
    with atomic_open(path, "wb") as handle:
        (np.savez_compressed if compress else np.savez)(handle, **arrays)
    return path


_PER_CONFORMER = ("positions_angstrom", "hamiltonian", "hamiltonian_0", "overlap", "energy_hartree", "scf_seconds",
                  "scf_cycles", "scf_guess")


def merge_npz(paths: list[str | Path], out: str | Path) -> Path:
    """Concatenate shared-format files of one molecule (same atoms and AO labels) into ``out``, atomically."""
    if not paths:
        raise ValueError("merge_npz needs at least one file")
    parts = [dict(np.load(p, allow_pickle=False)) for p in paths]
    first = parts[0]
    for p, d in zip(paths, parts, strict=True):
        for key in ("atomic_numbers", "ao_labels"):
            if not np.array_equal(d[key], first[key]):
                raise ValueError(f"{p}: {key} differs from {paths[0]}; cannot merge different molecules or bases")
    merged = dict(first)
    for key in _PER_CONFORMER:
        if all(key in d for d in parts):
            merged[key] = np.concatenate([d[key] for d in parts])
        else:  # e.g. scf_cycles, absent from parts written before it was recorded
            merged.pop(key, None)
    path = Path(out)
    with atomic_open(path, "wb") as handle:
        np.savez(handle, **merged)
    return path


def default_ao_labels(layout: OrbitalLayout, numbers) -> list[str]:
    """AO labels in pyscf's spelling, e.g. ``"0 O 2px"`` (principal quantum numbers counted per l from l + 1)."""
    from pymatgen.core.periodic_table import Element

    comps = {0: [""], 1: ["x", "y", "z"], 2: ["xy", "yz", "z^2", "xz", "x2-y2"]}
    labels = []
    for atom, z in enumerate(numbers):
        symbol, count = Element.from_Z(int(z)).symbol, {}
        for l in layout.shells_of(int(z)):
            count[l] = count.get(l, l) + 1
            names = comps.get(l, [f"{m:+d}" for m in range(-l, l + 1)])
            labels.extend(f"{atom} {symbol} {count[l]}{'spdfghi'[l]}{c}" for c in names)
    return labels
