"""Electronic-structure Hamiltonians: orbital layout, data, equivariant model, prediction.

Public data API (numpy-only at import; torch, e3nn, pyscf and h5py are imported inside the functions that need
them): :class:`OrbitalLayout` (pyscf <-> e3nn basis), :class:`HamiltonianStructure` (DeepH-keyed blocks in e3nn
order, Hartree), the shared npz format (:func:`read_npz`, :func:`write_npz`), the DeepH folder layout
(:func:`read_deeph`, :func:`write_deeph`) and Bloch sums for crystals (:mod:`sciml.hamiltonian.periodic`).
"""

from sciml.hamiltonian.data.deeph import read_deeph, read_deeph_tree, write_deeph
from sciml.hamiltonian.data.npz import read_npz, write_npz
from sciml.hamiltonian.orbitals import OrbitalLayout, block_wigner, wigner_D
from sciml.hamiltonian.structure import HamiltonianStructure

__all__ = ["HamiltonianStructure", "OrbitalLayout", "block_wigner", "read_deeph", "read_deeph_tree", "read_npz",
           "wigner_D", "write_deeph", "write_npz"]
