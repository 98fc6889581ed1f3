"""Quality of generated crystal Hamiltonians: how well the stored H(R), S(R) blocks reproduce pyscf's bands.

For every DeepH folder under the given roots (made by ``sciml data hamiltonian --crystal ...``), band energies
from the Bloch sums of the stored blocks are compared with pyscf's own, computed during generation:
- on the SCF k-mesh (``meta.kpts`` vs ``meta.mo_energy``, self-consistent eigenvalues),
- off the mesh (``meta.check_kpts``: L, X and three random points, vs ``meta.check_bands``: non-SCF Fock builds
  from the SCF density at those k).
H0 (zeroth-step) bands are the baseline a model must improve on, raw and after the best uniform shift
(the energy-reference gauge). Writes ``benchmarks/results/hamiltonian_crystal_data.json``.

Usage: ``python benchmarks/hamiltonian_crystal_data.py runs/hamiltonian_data/crystals/deeph/Si ...``
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from sciml.core.io.atomic import atomic_write_text
from sciml.hamiltonian.data.deeph import HARTREE_EV, read_deeph_tree
from sciml.hamiltonian.periodic import structure_bands

MEV = 1000 * HARTREE_EV
OUT = Path(__file__).parent / "results" / "hamiltonian_crystal_data.json"


def structure_errors(structure, layout) -> dict:
    """Max band-energy errors (meV) of the stored H and of H0 against pyscf, occupied and all bands."""
    m = structure.meta
    n = int(m["n_occupied"])
    ref = np.asarray(m["check_bands"])
    off = structure_bands(structure, layout, m["check_kpts"]) - ref
    on = structure_bands(structure, layout, m["kpts"]) - np.asarray(m["mo_energy"])
    h0 = structure_bands(structure, layout, m["check_kpts"], "H0")[:, :n] - ref[:, :n]
    return {"index": m.get("index"), "n_blocks": len(structure.blocks["H"]), "scf_seconds": m.get("scf_seconds"),
            "H_off_mesh_occupied_meV": MEV * np.abs(off[:, :n]).max(), "H_off_mesh_all_meV": MEV * np.abs(off).max(),
            "H_on_mesh_occupied_meV": MEV * np.abs(on[:, :n]).max(),
            "H0_off_mesh_occupied_meV": MEV * np.abs(h0).max(),
            "H0_shifted_off_mesh_occupied_meV": MEV * np.abs(h0 - h0.mean()).max()}


def main(roots: list[str]) -> dict:
    """Evaluate every root; print one line per structure; write the JSON atomically."""
    results = {}
    for root in roots:
        structures, layout = read_deeph_tree(root)
        rows = [structure_errors(s, layout) for s in structures]
        for r in rows:
            print(f"{root} #{r['index']}: H off-mesh occ {r['H_off_mesh_occupied_meV']:.2f} meV "
                  f"(all {r['H_off_mesh_all_meV']:.2f}), on-mesh occ {r['H_on_mesh_occupied_meV']:.2f}; "
                  f"H0 occ {r['H0_off_mesh_occupied_meV']:.0f} meV, "
                  f"shifted {r['H0_shifted_off_mesh_occupied_meV']:.0f}")
        meta = structures[0].meta
        results[str(root)] = {"settings": {k: meta.get(k) for k in ("basis", "pseudo", "xc", "kmesh", "fock_kmesh",
                                                                      "cutoff")}, "structures": rows}
    atomic_write_text(OUT, json.dumps(results, indent=1, default=float) + "\n")
    print(f"wrote {OUT}")
    return results


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    main(sys.argv[1:])
