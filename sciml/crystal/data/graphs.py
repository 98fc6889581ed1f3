"""Turn a pymatgen ``Structure`` into a periodic atom graph with reflections (the model input)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch_geometric.data import Data

from sciml.core import keys
from sciml.core.neighbors import neighbor_list, reciprocal_hkl
from sciml.core.structures import StructureError

LEGACY_TIE_TOL = 1e-4  # Å: the tie tolerance of artifacts that do not store one


@dataclass(frozen=True)
class GraphSettings:
    """How structures become graphs; frozen in every artifact and checked on load.

    Attributes
    ----------
    cutoff : float
        Neighbour search radius, Å.
    max_neighbors : int or None
        Keep the k nearest neighbours (plus ties), or all within ``cutoff`` when ``None``.
    tie_tol : float
        Neighbours within ``tie_tol`` Å of the k-th nearest are kept too, so a shell is kept or dropped whole:
        an ideal high-symmetry crystal and the same crystal displaced by much less than ``tie_tol`` get the same
        graph (ideal diamond: 4 + 12 neighbours at k = 12 either way). Artifacts written before this setting
        existed were built with :data:`LEGACY_TIE_TOL` and keep it (:meth:`from_stored`).
    g_max : float
        Keep reflections with ``0 < |G| ≤ g_max``, Å⁻¹ (``G`` includes the 2π).

    """

    cutoff: float = 8.0
    max_neighbors: int | None = 12
    g_max: float = 4.0
    tie_tol: float = 0.01

    @classmethod
    def from_dict(cls, d: dict) -> GraphSettings:
        """Build from a plain dict, rejecting unknown keys."""
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown graph settings {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}")
        return cls(**d)

    @classmethod
    def from_stored(cls, d: dict) -> GraphSettings:
        """Settings stored in an artifact: without ``tie_tol`` they are an older artifact's, built with 1e-4 Å."""
        return cls.from_dict({"tie_tol": LEGACY_TIE_TOL} | dict(d))

    def to_dict(self) -> dict:
        """Plain dict (JSON/YAML friendly)."""
        return asdict(self)


def structure_to_graph(structure, settings: GraphSettings, source: str = "<structure>",
                       dtype: torch.dtype = torch.float32) -> Data:
    """Build the graph of one structure.

    Parameters
    ----------
    structure : pymatgen.core.Structure
        An ordered, validated periodic structure.
    settings : GraphSettings
        Neighbour and reflection settings.
    source : str
        Name used in error messages.
    dtype : torch.dtype
        Floating dtype of positions and cell.

    Returns
    -------
    torch_geometric.data.Data
        Fields named in :mod:`sciml.core.keys` (``z, pos, cell, edge_index, edge_shift, hkl, n_refl, n_atoms``).

    Raises
    ------
    StructureError
        If an atom has no neighbour within the cutoff.

    """
    edge_index, shifts = neighbor_list(structure, settings.cutoff, settings.max_neighbors, settings.tie_tol)
    n = len(structure)
    isolated = np.setdiff1d(np.arange(n), edge_index[0])
    if len(isolated):
        site = structure[int(isolated[0])]
        raise StructureError(source, f"atom {int(isolated[0])} ({site.specie}) has no neighbour within "
                             f"{settings.cutoff} Å", "check the cell and coordinates, or use a larger cutoff")
    lattice = np.asarray(structure.lattice.matrix, dtype=np.float64)
    hkl = reciprocal_hkl(lattice, settings.g_max)
    return Data(**{
        keys.ATOMIC_NUMBERS: torch.tensor(structure.atomic_numbers, dtype=torch.long),
        keys.POS: torch.tensor(structure.cart_coords, dtype=dtype),
        keys.CELL: torch.tensor(lattice, dtype=dtype).unsqueeze(0),
        keys.EDGE_INDEX: torch.as_tensor(edge_index, dtype=torch.long),
        keys.EDGE_SHIFT: torch.as_tensor(shifts, dtype=dtype),
        keys.HKL: torch.as_tensor(hkl, dtype=dtype),
        keys.N_REFL: torch.tensor([len(hkl)], dtype=torch.long),
        keys.N_ATOMS: torch.tensor([n], dtype=torch.long),
    })
