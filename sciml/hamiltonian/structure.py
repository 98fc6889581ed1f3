"""In-memory Hamiltonian data of one structure: geometry plus AO-matrix blocks keyed the DeepH way.

A block ``blocks[name][(Rx, Ry, Rz, i, j)]`` is <i, cell 0 | M | j, cell R>, shape (n_orb_i, n_orb_j), in e3nn
order and Hartree, with 0-based atoms i, j (1-based only on disk) and R an integer lattice translation
(R = (0, 0, 0) for molecules). Names: ``"H"`` (converged Kohn-Sham/Fock), ``"H0"`` (zeroth-step Fock matrix of
the initial-guess density), ``"S"`` (overlap).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sciml.hamiltonian.orbitals import OrbitalLayout

__all__ = ["BLOCK_NAMES", "HamiltonianStructure", "EdgeKey"]

#: matrices a structure may carry
BLOCK_NAMES = ("H", "H0", "S")
#: DeepH block key (Rx, Ry, Rz, i, j), atoms 0-based in memory
EdgeKey = tuple[int, int, int, int, int]


@dataclass
class HamiltonianStructure:
    """One structure with its AO-matrix blocks.

    Attributes
    ----------
    numbers : (n_atoms,) int64 atomic numbers.
    positions : (n_atoms, 3) float64 Cartesian positions, Å.
    lattice : (3, 3) float64 lattice vectors as rows, Å; ``None`` for a molecule.
    blocks : ``{name: {(Rx, Ry, Rz, i, j): (n_orb_i, n_orb_j) float64}}``, e3nn order, Hartree.
    meta : free-form facts: ``n_occupied``, ``energy`` (Hartree), ``basis``, ``xc``, ``scf_seconds``, ``source``...

    """

    numbers: np.ndarray
    positions: np.ndarray
    lattice: np.ndarray | None = None
    blocks: dict[str, dict[EdgeKey, np.ndarray]] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.numbers = np.asarray(self.numbers, dtype=np.int64).reshape(-1)
        self.positions = np.asarray(self.positions, dtype=np.float64)
        if self.positions.shape != (len(self.numbers), 3):
            raise ValueError(f"positions have shape {self.positions.shape}, expected ({len(self.numbers)}, 3)")
        if self.lattice is not None:
            self.lattice = np.asarray(self.lattice, dtype=np.float64)
            if self.lattice.shape != (3, 3):
                raise ValueError(f"lattice has shape {self.lattice.shape}, expected (3, 3) (rows = vectors, Å)")

    @property
    def is_periodic(self) -> bool:
        """True for a crystal (a lattice is set)."""
        return self.lattice is not None

    @property
    def n_atoms(self) -> int:
        return len(self.numbers)

    @classmethod
    def from_dense(cls, numbers, positions, mats: dict[str, np.ndarray], layout: OrbitalLayout,
                   meta: dict | None = None, lattice=None, order: str = "pyscf") -> HamiltonianStructure:
        """Split full (n_ao, n_ao) matrices (pyscf order, or e3nn with ``order="e3nn"``) into e3nn blocks, R = 0.

        For a molecule (or a Γ-only crystal): all atom pairs (i, j). ``mats`` maps names (``"H"``, ``"H0"``,
        ``"S"``) to matrices in Hartree.
        """
        numbers = np.asarray(numbers, dtype=np.int64)
        off = layout.atom_offsets(numbers)
        blocks = {}
        for name, mat in mats.items():
            m = np.asarray(mat, dtype=np.float64)
            m = layout.to_e3nn(m, numbers) if order == "pyscf" else m
            blocks[name] = {(0, 0, 0, i, j): np.ascontiguousarray(m[off[i]:off[i + 1], off[j]:off[j + 1]])
                            for i in range(len(numbers)) for j in range(len(numbers))}
        return cls(numbers, positions, lattice, blocks, dict(meta or {}))

    def to_dense(self, name: str, layout: OrbitalLayout, order: str = "e3nn") -> np.ndarray:
        """Full (n_ao, n_ao) matrix of a molecule from its R = 0 blocks, in ``"e3nn"`` or ``"pyscf"`` order.

        Missing blocks are zero. For crystals use :func:`sciml.hamiltonian.periodic.bloch_sum`.
        """
        if self.is_periodic and any(k[:3] != (0, 0, 0) for k in self.blocks_of(name)):
            raise ValueError("to_dense is for molecules; use sciml.hamiltonian.periodic.bloch_sum for crystals")
        if order not in ("e3nn", "pyscf"):
            raise ValueError(f"order must be 'e3nn' or 'pyscf', got {order!r}")
        off = layout.atom_offsets(self.numbers)
        out = np.zeros((off[-1], off[-1]))
        for (_, _, _, i, j), block in self.blocks_of(name).items():
            out[off[i]:off[i + 1], off[j]:off[j + 1]] = block
        return layout.to_pyscf(out, self.numbers) if order == "pyscf" else out

    def blocks_of(self, name: str) -> dict[EdgeKey, np.ndarray]:
        """The blocks of one matrix; KeyError naming what is there when absent."""
        if name not in self.blocks:
            raise KeyError(f"structure {self.meta.get('source', '')!s} has no {name!r} blocks "
                           f"(has {sorted(self.blocks)})")
        return self.blocks[name]

    def edges(self) -> np.ndarray:
        """Sorted (n_edges, 5) int64 array of keys (Rx, Ry, Rz, i, j) present in every matrix."""
        if not self.blocks:
            return np.zeros((0, 5), dtype=np.int64)
        common = set.intersection(*(set(b) for b in self.blocks.values()))
        return np.asarray(sorted(common), dtype=np.int64).reshape(-1, 5)

    def check(self, layout: OrbitalLayout) -> None:
        """Raise ValueError if a block's shape disagrees with the layout or an atom index is out of range."""
        for name, blocks in self.blocks.items():
            for key, block in blocks.items():
                i, j = key[3], key[4]
                if not (0 <= i < self.n_atoms and 0 <= j < self.n_atoms):
                    raise ValueError(f"{name} block {key}: atom index out of range 0..{self.n_atoms - 1}")
                want = (layout.n_orbitals(self.numbers[i]), layout.n_orbitals(self.numbers[j]))
                if block.shape != want:
                    raise ValueError(f"{name} block {key} has shape {block.shape}, the orbital basis needs {want}; "
                                     "the data was made with a different basis set")
