"""Write the example structures in ``examples/structures/``.

Ideal cubic ABX3 perovskites, one per format, and ordinary crystals (a salt, two semiconductors, a battery cathode,
a metal alloy) as CIF.

The perovskites are built here from lattice constants (Å, approximate room-temperature pseudo-cubic values)
with pymatgen: A at the corner (0, 0, 0), B at the body centre (½, ½, ½), X at the three face centres.
They exercise every reader of :func:`sciml.data.read_structure` (CIF, POSCAR, ``.vasp``, extxyz, JSON).
The other crystals are built from their space group, experimental lattice constants and Wyckoff positions
(room-temperature literature values, rounded).

Run ``python examples/make_structures.py [OUT_DIR]``; the output is deterministic.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PEROVSKITES = {  # formula: (A, B, X, cubic lattice constant in Å, file name)
    "SrTiO3": ("Sr", "Ti", "O", 3.905, "SrTiO3.cif"),
    "BaZrO3": ("Ba", "Zr", "O", 4.19, "BaZrO3.vasp"),
    "KNbO3": ("K", "Nb", "O", 4.02, "KNbO3.extxyz"),
    "CaTiO3": ("Ca", "Ti", "O", 3.84, "CaTiO3.json"),
    "LaAlO3": ("La", "Al", "O", 3.79, "POSCAR_LaAlO3"),
    "NaTaO3": ("Na", "Ta", "O", 3.93, "NaTaO3.xyz"),
}
FRAC = [[0.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, 0.5, 0.0], [0.5, 0.0, 0.5], [0.0, 0.5, 0.5]]
CRYSTALS = {  # file name: (space group, lattice (a, b, c) in Å, species, fractional coordinates of the Wyckoff sites)
    "NaCl.cif": ("Fm-3m", (5.640,) * 3, ["Na", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5]]),  # rock salt
    "Si.cif": ("Fd-3m", (5.431,) * 3, ["Si"], [[0, 0, 0]]),  # diamond structure
    "GaAs.cif": ("F-43m", (5.653,) * 3, ["Ga", "As"], [[0, 0, 0], [0.25, 0.25, 0.25]]),  # zinc blende
    "LiFePO4.cif": ("Pnma", (10.332, 6.010, 4.692), ["Li", "Fe", "P", "O", "O", "O"],  # olivine cathode
                    [[0, 0, 0], [0.2822, 0.25, 0.9747], [0.0950, 0.25, 0.4182], [0.0968, 0.25, 0.7428],
                     [0.4571, 0.25, 0.2060], [0.1656, 0.0465, 0.2848]]),
    "CuZn.cif": ("Pm-3m", (2.95,) * 3, ["Cu", "Zn"], [[0, 0, 0], [0.5, 0.5, 0.5]]),  # ordered beta brass (B2)
}


def perovskite(a_site: str, b_site: str, x_site: str, a: float):
    """Return the 5-atom cubic perovskite ``A B X3`` with lattice constant ``a`` (Å), a pymatgen Structure."""
    from pymatgen.core import Lattice, Structure

    return Structure(Lattice.cubic(a), [a_site, b_site, x_site, x_site, x_site], FRAC)


def crystal(space_group: str, abc: tuple, species: list, coords: list):
    """The conventional cell of a crystal from its space group, lattice constants (Å) and Wyckoff sites."""
    from pymatgen.core import Lattice, Structure

    lattice = Lattice.orthorhombic(*abc) if len(set(abc)) > 1 else Lattice.cubic(abc[0])
    return Structure.from_spacegroup(space_group, lattice, species, coords)


def write(structure, path: Path) -> None:
    """Write ``structure`` in the format its file name implies (cif, POSCAR/vasp, extxyz/xyz, json)."""
    import ase.io
    from pymatgen.io.ase import AseAtomsAdaptor
    from pymatgen.io.cif import CifWriter
    from pymatgen.io.vasp import Poscar

    suffix = path.suffix.lower()
    if suffix == ".cif":
        CifWriter(structure).write_file(path)
    elif suffix == ".vasp" or "POSCAR" in path.name:
        Poscar(structure, comment=structure.composition.reduced_formula).write_file(path)
    elif suffix in (".xyz", ".extxyz"):
        ase.io.write(path, AseAtomsAdaptor.get_atoms(structure), format="extxyz")
    elif suffix == ".json":
        path.write_text(json.dumps(structure.as_dict(), indent=1) + "\n")
    else:
        raise ValueError(f"{path}: no writer for this file name")


def main(out_dir: str | Path = Path(__file__).parent / "structures") -> list[Path]:
    """Write every example structure into ``out_dir`` and return the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for a_site, b_site, x_site, a, name in PEROVSKITES.values():
        write(perovskite(a_site, b_site, x_site, a), out / name)
        paths.append(out / name)
    for name, args in CRYSTALS.items():
        write(crystal(*args), out / name)
        paths.append(out / name)
    return paths


if __name__ == "__main__":
    for written in main(*sys.argv[1:2]):
        print(f"wrote {written}")
