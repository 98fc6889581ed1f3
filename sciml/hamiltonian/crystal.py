"""Periodic path (crystals), closed form: the tensor-product ridge model on real-space blocks H(R).

A crystal's items are its DeepH blocks: on-site blocks ``(R = 0, i, i)`` are nodes, every other block
``(R, i, j)`` is an edge with vector ``r = x_j + R·L − x_i`` (Å; lattice vectors as rows of ``L``). The
:class:`~sciml.hamiltonian.nn.ridge.TensorProductRidge` model (E(3)-equivariant, fitted in closed form) predicts
``ΔH(R) = H(R) − H0(R)`` block by block; blocks are symmetrised with their partners,
``H_ij(R) = ½ (B_ij(R) + B_ji(−R)ᵀ)``, and band energies come from Bloch sums
(:func:`sciml.hamiltonian.periodic.structure_bands`). The equivariant network trained with a band-energy loss on
top of this ridge lives in :mod:`sciml.hamiltonian.crystal_net` and :mod:`sciml.hamiltonian.crystal_train`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from sciml.hamiltonian.data.datamodule import bases
from sciml.hamiltonian.orbitals import OrbitalLayout
from sciml.hamiltonian.periodic import structure_bands
from sciml.hamiltonian.structure import HamiltonianStructure
from sciml.hamiltonian.units import HARTREE_MEV
from sciml.hamiltonian.nn.ridge import TensorProductRidge

#: radial Gaussians covering periodic pair blocks out to ~14 Å
CRYSTAL_RIDGE = {"lmax": 2, "lam": 1e-6, "centres": [1.5, 2.5, 3.5, 4.5, 6.0, 8.0, 10.0, 12.0], "width": 1.2}


def crystal_items(s: HamiltonianStructure, layout: OrbitalLayout, node_basis, edge_basis) -> dict:
    """Nodes (on-site blocks) and edges (all other blocks) of one crystal, with H0/H irreps (Hartree)."""
    keys = [tuple(int(v) for v in k) for k in s.edges()]
    node_keys = [k for k in keys if k[:3] == (0, 0, 0) and k[3] == k[4]]
    edge_keys = [k for k in keys if not (k[:3] == (0, 0, 0) and k[3] == k[4])]
    z = [int(v) for v in s.numbers]
    if sorted(k[3] for k in node_keys) != list(range(len(z))):
        raise ValueError(f"structure {s.meta.get('source', '')}: on-site blocks missing for some atoms")

    def irreps(name, items, basis):
        mats = s.blocks_of(name)
        return torch.stack([basis.to_irreps(torch.from_numpy(mats[k]), z[k[3]], z[k[4]]) for k in items])

    shift = np.array([k[:3] for k in edge_keys], dtype=np.float64).reshape(-1, 3)
    ij = np.array([k[3:] for k in edge_keys], dtype=np.int64).reshape(-1, 2)
    vec = s.positions[ij[:, 1]] + shift @ s.lattice - s.positions[ij[:, 0]]
    out = {"node_keys": node_keys, "edge_keys": edge_keys, "edge_index": torch.from_numpy(ij.T.copy()),
           "vec": torch.from_numpy(vec), "node_type": torch.tensor([node_basis.pair_index(v, v) for v in z]),
           "edge_type": torch.tensor([edge_basis.pair_index(z[a], z[b]) for a, b in ij], dtype=torch.long),
           "x_node": irreps("H0", sorted(node_keys, key=lambda k: k[3]), node_basis),
           "x_edge": irreps("H0", edge_keys, edge_basis)}
    if "H" in s.blocks:
        out["h_node"] = irreps("H", sorted(node_keys, key=lambda k: k[3]), node_basis)
        out["h_edge"] = irreps("H", edge_keys, edge_basis)
    return out


def concat_items(items: list[dict]) -> dict:
    """Items of several crystals as one disjoint graph (node indices of ``edge_index`` shifted)."""
    starts = np.cumsum([0] + [len(it["node_type"]) for it in items[:-1]])
    out = {k: torch.cat([it[k] for it in items]) for k in ("vec", "node_type", "edge_type", "x_node", "x_edge",
                                                           "h_node", "h_edge") if k in items[0]}
    out["edge_index"] = torch.cat([it["edge_index"] + int(s) for it, s in zip(items, starts, strict=True)], dim=1)
    return out


def fit_crystal_ridge(structures, layout: OrbitalLayout, settings: dict | None = None):
    """Fit the closed-form model on crystals; return ``(ridge, node_basis, edge_basis)``."""
    settings = CRYSTAL_RIDGE | (settings or {})
    nb, eb = bases(layout)
    b = concat_items([crystal_items(s, layout, nb, eb) for s in structures])
    ridge = TensorProductRidge.from_settings(nb, eb, {k: v for k, v in settings.items() if k != "shapes"})
    masks = (torch.stack([nb.mask(*p) for p in nb.pairs]), torch.stack([eb.mask(*p) for p in eb.pairs]))
    ridge.fit(b["x_node"], b["x_edge"], b["vec"], b["edge_index"], b["node_type"], b["edge_type"],
              b["h_node"] - b["x_node"], b["h_edge"] - b["x_edge"], masks, lam=settings["lam"])
    return ridge, nb, eb


@torch.no_grad()
def ridge_irreps(ridge: TensorProductRidge, it: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Ridge ΔH irreps (Hartree) of the items of :func:`crystal_items`: ``(N, Dn)`` and ``(E, De)``."""
    return ridge(it["x_node"], it["x_edge"], it["vec"], it["edge_index"], it["node_type"], it["edge_type"])


@torch.no_grad()
def predict_crystal(ridge: TensorProductRidge, s: HamiltonianStructure, layout: OrbitalLayout, nb, eb
                    ) -> HamiltonianStructure:
    """A copy of ``s`` whose ``H`` blocks are predicted (``H0 + ΔH``, symmetrised); ``H0`` and ``S`` kept."""
    it = crystal_items(s, layout, nb, eb)
    dn, de = ridge_irreps(ridge, it)
    return structure_from_irreps(s, it, it["x_node"] + dn, it["x_edge"] + de, nb, eb)


def structure_from_irreps(s: HamiltonianStructure, it: dict, h_node, h_edge, nb, eb) -> HamiltonianStructure:
    """A copy of ``s`` with ``H`` from predicted irreps (Hartree) of the items ``it`` of :func:`crystal_items`.

    ``h_node (N, Dn)`` in atom order, ``h_edge (E, De)`` in ``it["edge_keys"]`` order; blocks are symmetrised
    with their partners, ``H_ij(R) = ½ (B_ij(R) + B_ji(−R)ᵀ)`` (a block without a partner is kept as is).
    """
    z = [int(v) for v in s.numbers]
    raw = {}
    for k, x in zip(sorted(it["node_keys"], key=lambda k: k[3]), h_node.detach(), strict=True):
        raw[k] = nb.to_blocks(x, z[k[3]], z[k[4]]).numpy()
    for k, x in zip(it["edge_keys"], h_edge.detach(), strict=True):
        raw[k] = eb.to_blocks(x, z[k[3]], z[k[4]]).numpy()
    sym = {}
    for (rx, ry, rz, i, j), block in raw.items():
        partner = raw.get((-rx, -ry, -rz, j, i))
        sym[(rx, ry, rz, i, j)] = block if partner is None else 0.5 * (block + partner.T)
    blocks = {"H": sym, **{k: v for k, v in s.blocks.items() if k in ("H0", "S")}}
    return HamiltonianStructure(s.numbers, s.positions, s.lattice, blocks, dict(s.meta))


def crystal_errors(pred: HamiltonianStructure, ref: HamiltonianStructure, layout: OrbitalLayout) -> dict:
    """H MAE over blocks (µHa) and occupied-band MAE (meV) against pyscf, for the prediction and for H0.

    H MAE needs the same atom images in both (else only bands). Bands are compared at the reference's off-mesh
    ``check_kpts`` with the pyscf ``check_bands`` stored by the
    generator; ``reference_h_occupied_band_mae_mev`` is the floor set by the reference H(R) itself.
    """
    keys = list(ref.blocks_of("H"))
    kpts, bands = np.asarray(ref.meta["check_kpts"]), np.asarray(ref.meta["check_bands"])
    occ = int(ref.meta["n_occupied"])
    out = {}
    if set(keys) <= set(pred.blocks_of("H")):  # same atom images (a CIF may wrap atoms: then bands only)
        err = np.concatenate([np.abs(pred.blocks["H"][k] - ref.blocks["H"][k]).ravel() for k in keys])
        err0 = np.concatenate([np.abs(ref.blocks["H0"][k] - ref.blocks["H"][k]).ravel() for k in keys])
        out = {"h_mae_microhartree": float(err.mean() * 1e6), "h0_mae_microhartree": float(err0.mean() * 1e6)}
    for name, st, tag in (("model", pred, "H"), ("h0", ref, "H0"), ("reference_h", ref, "H")):
        b = structure_bands(st, layout, kpts, tag)
        out[f"{name}_occupied_band_mae_mev"] = float(np.abs(b[:, :occ] - bands[:, :occ]).mean() * HARTREE_MEV)
    return out


def read_crystals(root: str | Path) -> tuple[list[HamiltonianStructure], OrbitalLayout]:
    """Every periodic DeepH folder under ``root`` (any elements; layouts merged), sorted by path."""
    from sciml.hamiltonian.data.deeph import read_deeph_tree

    if not any(Path(root).rglob("element.dat")):
        raise FileNotFoundError(f"{root}: no DeepH folders (with element.dat); make some with "
                                "`sciml data hamiltonian --crystal Si --out DIR`")
    structures, layout = read_deeph_tree(root, merge_layouts=True)
    for s in structures:
        if not s.is_periodic:
            raise ValueError(f"{s.meta.get('source')}: no lat.dat; the crystal model needs periodic structures")
    return structures, layout
