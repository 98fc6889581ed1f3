"""DeepH folder layout: one folder per structure (docs/design.md §3).

Files (lengths in Å):
- ``element.dat``: atomic numbers, one per line; ``site_positions.dat``: 3 x n_sites, columns are positions;
- ``lat.dat`` / ``rlat.dat`` (crystals only): 3 x 3, columns are the lattice / reciprocal vectors (rlat = 2π lat^-T);
- ``orbital_types.dat``: one line per atom with the l of each shell, e.g. ``0 0 1 1 2``;
- ``info.json``: ``nsites, isorthogonal, isspinful, norbits, fermi_level`` (DeepH's keys) plus ``energy_unit``
  ("Hartree"), ``length_unit`` ("Angstrom"), ``orbital_order``, ``periodic`` and ``meta``;
- ``hamiltonians.h5``, ``hamiltonians_0.h5``, ``overlaps.h5``: one dataset per block ``"[Rx, Ry, Rz, i, j]"``
  (atoms 1-based), <i, cell 0 | M | j, cell R> of shape (n_orb_i, n_orb_j).

Orbital order written: ``"openmx"``, DeepH's own (p: x, y, z; d: z², x²-y², xy, xz, yz; f and higher:
m = 0, +1, -1, +2, -2, ...), so DeepH tools read our folders. Reading accepts ``"openmx"`` (the default when
``orbital_order`` is absent, as in DeepH's data), ``"pyscf"`` and ``"e3nn"``; energies without ``energy_unit``
are taken as eV (DeepH's unit) and converted to Hartree.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sciml.core.io.atomic import atomic_directory
from sciml.hamiltonian.harmonics import pyscf_to_e3nn_shell
from sciml.hamiltonian.orbitals import OrbitalLayout
from sciml.hamiltonian.structure import HamiltonianStructure
from sciml.hamiltonian.units import HARTREE_EV

__all__ = ["H5_FILES", "HARTREE_EV", "read_deeph", "read_deeph_tree", "write_deeph"]

#: block name -> HDF5 file
H5_FILES = {"H": "hamiltonians.h5", "H0": "hamiltonians_0.h5", "S": "overlaps.h5"}
ORDERS = ("openmx", "pyscf", "e3nn")


def openmx_permutation(l: int) -> np.ndarray:
    """``p`` with ``openmx_component[k] = pyscf_component[p[k]]`` for one shell."""
    if l == 2:
        return np.array([2, 4, 0, 3, 1])
    order = [0] + [s * m for m in range(1, l + 1) for s in (1, -1)]
    return np.array([l + m for m in order]) if l != 1 else np.arange(3)


def shell_from_e3nn(l: int, order: str) -> np.ndarray:
    """Orthogonal ``O_l`` with ``B_order = O_l B_e3nn O_l^T`` for one shell (``order`` in ORDERS)."""
    if order == "e3nn":
        return np.eye(2 * l + 1)
    to_pyscf = pyscf_to_e3nn_shell(l).T
    return to_pyscf if order == "pyscf" else to_pyscf[openmx_permutation(l)]


def _atom_maps(layout: OrbitalLayout, numbers, order: str) -> list[np.ndarray]:
    cache: dict[int, np.ndarray] = {}
    for z in set(int(z) for z in numbers):
        mats = [shell_from_e3nn(l, order) for l in layout.shells_of(z)]
        n = sum(m.shape[0] for m in mats)
        out, start = np.zeros((n, n)), 0
        for m in mats:
            out[start:start + len(m), start:start + len(m)] = m
            start += len(m)
        cache[z] = out
    return [cache[int(z)] for z in numbers]


def write_deeph(folder: str | Path, structure: HamiltonianStructure, layout: OrbitalLayout,
                order: str = "openmx") -> Path:
    """Write one structure as a DeepH folder, atomically (built in a temporary sibling, then renamed).

    Blocks are converted from e3nn order to ``order`` and written in Hartree (stated in ``info.json``).
    """
    import h5py

    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    structure.check(layout)
    numbers = structure.numbers
    maps = _atom_maps(layout, numbers, order)
    with atomic_directory(folder) as tmp:
        np.savetxt(tmp / "element.dat", numbers, fmt="%d")
        np.savetxt(tmp / "site_positions.dat", structure.positions.T, fmt="%.17g")
        if structure.is_periodic:
            np.savetxt(tmp / "lat.dat", structure.lattice.T, fmt="%.17g")
            np.savetxt(tmp / "rlat.dat", 2 * np.pi * np.linalg.inv(structure.lattice), fmt="%.17g")
        (tmp / "orbital_types.dat").write_text(
            "".join(" ".join(str(l) for l in layout.shells_of(z)) + "\n" for z in numbers))
        info = {"nsites": int(len(numbers)), "isorthogonal": False, "isspinful": False,
                "norbits": int(layout.atom_offsets(numbers)[-1]), "fermi_level": structure.meta.get("fermi_level"),
                "energy_unit": "Hartree", "length_unit": "Angstrom", "orbital_order": order,
                "periodic": structure.is_periodic, "meta": _jsonable(structure.meta)}
        (tmp / "info.json").write_text(json.dumps(info, indent=1) + "\n")
        for name, blocks in structure.blocks.items():
            if name not in H5_FILES:
                continue
            with h5py.File(tmp / H5_FILES[name], "w") as h5:
                for (rx, ry, rz, i, j), block in sorted(blocks.items()):
                    h5[f"[{rx}, {ry}, {rz}, {i + 1}, {j + 1}]"] = maps[i] @ block @ maps[j].T
    return Path(folder)


def read_deeph(folder: str | Path, layout: OrbitalLayout | None = None
               ) -> tuple[HamiltonianStructure, OrbitalLayout]:
    """Read one DeepH folder into an e3nn-order, Hartree :class:`HamiltonianStructure`.

    ``layout`` (e.g. a trained model's) is checked against ``orbital_types.dat``; without one it is built from
    the folder. Missing optional HDF5 files just leave that matrix out.
    """
    import h5py

    folder = Path(folder)
    for req in ("element.dat", "site_positions.dat", "orbital_types.dat"):
        if not (folder / req).is_file():
            raise FileNotFoundError(f"DeepH folder {folder} has no {req}; write it with sciml data hamiltonian "
                                    "--format deeph or DeepH's preprocessing")
    info = json.loads((folder / "info.json").read_text()) if (folder / "info.json").is_file() else {}
    numbers = np.atleast_1d(np.loadtxt(folder / "element.dat")).astype(np.int64)
    positions = np.loadtxt(folder / "site_positions.dat", ndmin=2).reshape(3, -1).T
    lattice = np.loadtxt(folder / "lat.dat").T if (folder / "lat.dat").is_file() else None
    file_layout = _layout_from_types(folder, numbers)
    if layout is not None:
        for z in set(numbers.tolist()):
            if layout.shells_of(z) != file_layout.shells_of(z):
                raise ValueError(f"{folder}/orbital_types.dat: element Z={z} has shells {file_layout.shells_of(z)}, "
                                 f"the model's basis has {layout.shells_of(z)}; the basis set differs")
    layout = layout or file_layout
    order = info.get("orbital_order", "openmx")
    if order not in ORDERS:
        raise ValueError(f"{folder}/info.json: orbital_order {order!r} is not one of {ORDERS}")
    scale = {"hartree": 1.0, "ev": 1.0 / HARTREE_EV}.get(str(info.get("energy_unit", "eV")).lower())
    if scale is None:
        raise ValueError(f"{folder}/info.json: energy_unit {info['energy_unit']!r} is not 'Hartree' or 'eV'")
    maps = _atom_maps(layout, numbers, order)
    blocks = {}
    for name, fname in H5_FILES.items():
        if (folder / fname).is_file():
            with h5py.File(folder / fname, "r") as h5:
                blocks[name] = {}
                for key, ds in h5.items():
                    rx, ry, rz, i, j = (int(v) for v in json.loads(key))
                    factor = 1.0 if name == "S" else scale
                    blocks[name][(rx, ry, rz, i - 1, j - 1)] = factor * (maps[i - 1].T @ ds[()] @ maps[j - 1])
    meta = dict(info.get("meta") or {})
    meta["source"] = str(folder)
    structure = HamiltonianStructure(numbers, positions, lattice, blocks, meta)
    structure.check(layout)
    return structure, layout


def read_deeph_tree(root: str | Path, layout: OrbitalLayout | None = None, merge_layouts: bool = False
                    ) -> tuple[list[HamiltonianStructure], OrbitalLayout]:
    """Read every DeepH folder under ``root`` (folders holding ``element.dat``), sorted by path.

    Without ``layout`` the first folder's layout is used for all, unless ``merge_layouts``: then each folder is
    read with its own ``orbital_types.dat`` and the layouts are merged (e.g. Si folders and C folders); an
    element with different shells in two folders is an error naming both.
    """
    folders = sorted(p.parent for p in Path(root).rglob("element.dat") if not p.parent.name.startswith("."))
    if not folders:
        raise FileNotFoundError(f"no DeepH folders (with element.dat) under {root}")
    out, shells, seen = [], {}, {}
    for f in folders:
        s, file_layout = read_deeph(f, None if merge_layouts else layout)
        if merge_layouts:
            for z, ls in file_layout.shells.items():
                if shells.setdefault(z, ls) != ls:
                    raise ValueError(f"{f}/orbital_types.dat: element Z={z} has shells {ls}, {seen[z]} has "
                                     f"{shells[z]}; all folders must use one basis set")
                seen.setdefault(z, f)
        layout = layout or file_layout
        out.append(s)
    return out, (OrbitalLayout(shells) if merge_layouts else layout)


def _layout_from_types(folder: Path, numbers: np.ndarray) -> OrbitalLayout:
    lines = (folder / "orbital_types.dat").read_text().split("\n")[: len(numbers)]
    if len(lines) != len(numbers):
        raise ValueError(f"{folder}/orbital_types.dat has {len(lines)} lines, element.dat {len(numbers)} atoms")
    shells: dict[int, tuple[int, ...]] = {}
    for z, line in zip(numbers.tolist(), lines, strict=True):
        ls = tuple(int(v) for v in line.split())
        if shells.setdefault(z, ls) != ls:
            raise ValueError(f"{folder}/orbital_types.dat: element Z={z} has different shells on different atoms")
    return OrbitalLayout(shells)


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value
