"""Crystal samples: the DeepH blocks H(R) of one periodic structure as a graph, plus what the band loss needs.

A crystal's items are its DeepH blocks: on-site blocks ``(R = 0, i, i)`` are nodes, every other block
``(R, i, j)`` is an edge with vector ``r = x_j + R·L − x_i`` (Å; lattice vectors as rows of ``L``), stored as
the Cartesian image shift ``R·L`` so the module computes ``r`` from positions in torch. Edges with
``|r| ≤ cutoff`` are network edges (``net_edge``); the closed-form ridge predicts every block.

Band setup (for the band-energy loss and metrics): index tensors that scatter block irreps into dense ``H(R)``
``(n_R, n, n)``, the overlap ``S(k)`` at the generator's SCF k-mesh (meta ``kpts``) and the reference bands
(pyscf's ``mo_energy`` there, else the bands of the reference H(R)), ``n_occupied + n_virtual`` lowest.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from sciml.hamiltonian.nn.blocks import BlockBasis
from sciml.hamiltonian.orbitals import OrbitalLayout
from sciml.hamiltonian.periodic import bloch_sum_torch, dense_blocks, structure_bands
from sciml.hamiltonian.structure import HamiltonianStructure


def block_keys(s: HamiltonianStructure) -> tuple[list[tuple], list[tuple]]:
    """``(node_keys, edge_keys)``: on-site keys in atom order and every other key, ``(Rx, Ry, Rz, i, j)``."""
    keys = [tuple(int(v) for v in k) for k in s.edges()]
    node_keys = sorted((k for k in keys if k[:3] == (0, 0, 0) and k[3] == k[4]), key=lambda k: k[3])
    edge_keys = [k for k in keys if not (k[:3] == (0, 0, 0) and k[3] == k[4])]
    if [k[3] for k in node_keys] != list(range(s.n_atoms)):
        raise ValueError(f"structure {s.meta.get('source', '')}: on-site blocks missing for some atoms")
    return node_keys, edge_keys


def crystal_sample(s: HamiltonianStructure, layout: OrbitalLayout, node_basis: BlockBasis, edge_basis: BlockBasis,
                   cutoff: float, n_virtual: int = 2, with_target: bool = True) -> dict:
    """Featurise one crystal: graph tensors (irreps in Hartree) and, with a target and k-points, its band setup."""
    node_keys, edge_keys = block_keys(s)
    z = [int(v) for v in s.numbers]

    def irreps(name, keys, basis):
        mats = s.blocks_of(name)
        rows = [basis.to_irreps(torch.from_numpy(mats[k]), z[k[3]], z[k[4]]) for k in keys]
        return torch.stack(rows) if rows else torch.zeros(0, basis.dim, dtype=torch.float64)

    shift = np.array([k[:3] for k in edge_keys], dtype=np.float64).reshape(-1, 3) @ s.lattice
    ij = np.array([k[3:] for k in edge_keys], dtype=np.int64).reshape(-1, 2)
    vec = s.positions[ij[:, 1]] + shift - s.positions[ij[:, 0]]
    out = {"z": torch.tensor(z), "pos": torch.from_numpy(s.positions).double(), "shift": torch.from_numpy(shift),
           "edge_index": torch.from_numpy(ij.T.copy()), "net_edge": torch.from_numpy(np.linalg.norm(vec, axis=1)
                                                                                    <= cutoff),
           "node_type": torch.tensor([node_basis.pair_index(v, v) for v in z]),
           "edge_type": torch.tensor([edge_basis.pair_index(z[a], z[b]) for a, b in ij], dtype=torch.long),
           "x_node": irreps("H0", node_keys, node_basis), "x_edge": irreps("H0", edge_keys, edge_basis),
           "keys": (node_keys, edge_keys), "bands": None}
    if with_target:
        out |= {"h_node": irreps("H", node_keys, node_basis), "h_edge": irreps("H", edge_keys, edge_basis)}
        if "kpts" in s.meta and "n_occupied" in s.meta:
            out["bands"] = band_setup(s, layout, node_basis, edge_basis, out, n_virtual)
    else:
        out |= {"h_node": torch.zeros_like(out["x_node"]), "h_edge": torch.zeros_like(out["x_edge"])}
    return out


def band_setup(s: HamiltonianStructure, layout: OrbitalLayout, nb: BlockBasis, eb: BlockBasis, sample: dict,
               n_virtual: int) -> dict:
    """Index tensors that scatter a sample's blocks into dense ``H(R)``, plus ``S(k)`` and the target bands."""
    off = layout.atom_offsets(s.numbers)
    n = int(off[-1])
    node_keys, edge_keys = sample["keys"]
    keys = node_keys + edge_keys
    rs = sorted({k[:3] for k in keys})
    index = {r: m for m, r in enumerate(rs)}
    neg = torch.tensor([index.get(tuple(-v for v in r), len(rs)) for r in rs])
    scatter, present = [], torch.zeros(len(rs) * n * n, dtype=torch.float64)
    kinds = ((nb, sample["node_type"], 0), (eb, sample["edge_type"], len(node_keys)))
    for kind, (basis, types, first) in enumerate(kinds):
        for t, (za, zb) in enumerate(basis.pairs):
            sel = (types == t).nonzero().flatten()
            if len(sel) == 0:
                continue
            na, nbo = layout.n_orbitals(za), layout.n_orbitals(zb)
            k = [keys[first + int(m)] for m in sel]
            r0 = torch.tensor([index[q[:3]] * n * n + off[q[3]] * n + off[q[4]] for q in k])
            idx = r0[:, None, None] + torch.arange(na)[None, :, None] * n + torch.arange(nbo)[None, None, :]
            present[idx.reshape(-1)] = 1.0
            scatter.append((kind, sel, idx.reshape(-1), za, zb))
    p = torch.cat([present.view(len(rs), n, n), torch.zeros(1, n, n, dtype=torch.float64)])
    count = (p[:-1] + p[neg].transpose(-1, -2)).clamp_min(1.0)
    kpts = np.asarray(s.meta["kpts"], dtype=np.float64)
    r_s, s_r = dense_blocks(s, "S", layout)
    n_bands = min(int(s.meta["n_occupied"]) + int(n_virtual), n)
    ref = (np.asarray(s.meta["mo_energy"], dtype=np.float64) if "mo_energy" in s.meta
           else structure_bands(s, layout, kpts, "H"))[:, :n_bands]
    return {"R": torch.tensor(rs, dtype=torch.float64).reshape(-1, 3), "n": n, "neg": neg, "count": count,
            "scatter": scatter, "kpts": torch.from_numpy(kpts), "n_bands": n_bands, "target": torch.from_numpy(ref),
            "sk": bloch_sum_torch(r_s, torch.from_numpy(s_r), kpts)}


def structure_from_irreps(s: HamiltonianStructure, keys: tuple, h_node, h_edge, nb: BlockBasis, eb: BlockBasis
                          ) -> HamiltonianStructure:
    """A copy of ``s`` with ``H`` from predicted irreps (Hartree) of the sample's ``keys``.

    ``h_node (N, Dn)`` in atom order, ``h_edge (E, De)`` in edge-key order; blocks are symmetrised with their
    partners, ``H_ij(R) = ½ (B_ij(R) + B_ji(−R)ᵀ)`` (a block without a partner is kept as is).
    """
    z = [int(v) for v in s.numbers]
    node_keys, edge_keys = keys
    raw = {}
    for k, x in zip(node_keys, h_node.detach(), strict=True):
        raw[k] = nb.to_blocks(x, z[k[3]], z[k[4]]).numpy()
    for k, x in zip(edge_keys, h_edge.detach(), strict=True):
        raw[k] = eb.to_blocks(x, z[k[3]], z[k[4]]).numpy()
    sym = {}
    for (rx, ry, rz, i, j), block in raw.items():
        partner = raw.get((-rx, -ry, -rz, j, i))
        sym[(rx, ry, rz, i, j)] = block if partner is None else 0.5 * (block + partner.T)
    blocks = {"H": sym, **{k: v for k, v in s.blocks.items() if k in ("H0", "S")}}
    return HamiltonianStructure(s.numbers, s.positions, s.lattice, blocks, dict(s.meta))


def read_crystals(root: str | Path) -> tuple[list[HamiltonianStructure], OrbitalLayout]:
    """Every periodic DeepH folder under ``root`` (any elements; layouts merged), sorted by path."""
    from sciml.hamiltonian.data.deeph import read_deeph_tree

    if not Path(root).exists():
        raise FileNotFoundError(f"{root}: no such folder; make crystal data with "
                                "`sciml data hamiltonian --crystal Si --out DIR`")
    if not any(Path(root).rglob("element.dat")):
        raise FileNotFoundError(f"{root}: no DeepH folders (with element.dat); make some with "
                                "`sciml data hamiltonian --crystal Si --out DIR`")
    structures, layout = read_deeph_tree(root, merge_layouts=True)
    for s in structures:
        if not s.is_periodic:
            raise ValueError(f"{s.meta.get('source')}: no lat.dat; the crystal model needs periodic structures")
    return structures, layout
