"""Names of batch fields shared by every atomistic model, each with its shape and unit.

A batch is a ``torch_geometric.data.Batch`` of graphs; the comment after each key gives the shape of the
batched tensor and its unit. ``n_graphs`` is the number of structures in the batch.
"""

from __future__ import annotations

ATOMIC_NUMBERS = "z"  # (n_atoms,) int64, atomic number Z
POS = "pos"  # (n_atoms, 3) float, Cartesian positions, Å
CELL = "cell"  # (n_graphs, 3, 3) float, lattice vectors as rows, Å
EDGE_INDEX = "edge_index"  # (2, n_edges) int64, [centre i, neighbour j] (batched node indices)
EDGE_SHIFT = "edge_shift"  # (n_edges, 3) float, image offset of j in lattice vectors: r_ij = x_j + S·L - x_i
HKL = "hkl"  # (n_refl, 3) float, Miller indices of the reflections kept for each structure
N_REFL = "n_refl"  # (n_graphs,) int64, number of reflections of each structure
N_ATOMS = "n_atoms"  # (n_graphs,) int64, atoms per structure
BATCH = "batch"  # (n_atoms,) int64, index of the structure each atom belongs to
TARGET = "y"  # (n_graphs,) float, regression target in the dataset's unit
