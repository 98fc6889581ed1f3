"""Write the example structures in ``examples/structures/``: ideal cubic ABX3 perovskites, one per format.

The structures are built here from lattice constants (Å, approximate room-temperature pseudo-cubic values)
with pymatgen: A at the corner (0, 0, 0), B at the body centre (½, ½, ½), X at the three face centres.
They exercise every reader of :func:`sciml.data.read_structure` (CIF, POSCAR, ``.vasp``, extxyz, JSON).

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


def perovskite(a_site: str, b_site: str, x_site: str, a: float):
    """Return the 5-atom cubic perovskite ``A B X3`` with lattice constant ``a`` (Å), a pymatgen Structure."""
    from pymatgen.core import Lattice, Structure

    return Structure(Lattice.cubic(a), [a_site, b_site, x_site, x_site, x_site], FRAC)


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
    return paths


if __name__ == "__main__":
    for written in main(*sys.argv[1:2]):
        print(f"wrote {written}")
