"""Equivariant linear model on Clebsch–Gordan tensor-product features, fitted in closed form (ridge).

For an edge ``(i, j)`` with direction ``Y(r̂_ij)`` (real spherical harmonics, ``l ≤ lmax``) and radial
Gaussians ``R_k(r_ij)``, the features are the coupled products (e3nn ``FullTensorProduct``, no weights)

    R_k(r_ij) · [x_ij ⊗ Y(r̂_ij),  x_i ⊗ Y(r̂_ij),  x_j ⊗ Y(r̂_ij)]          (edges)
    Σ_j R_k(r_ij) · [x_ij ⊗ Y(r̂_ij),  x_j ⊗ Y(r̂_ij),  x_i ⊗ Y(r̂_ij)]     (atoms)

with ``x`` the H0 block irreps (on-site ``x_i``, off-site ``x_ij``). For each item type (element or element
pair) and each output irrep ``(L, p)`` the prediction is ``ŷ^L = W_{t,L}ᵀ f^L`` — one matrix per type and
irrep, shared by the ``2L+1`` components, so the model is exactly E(3)-equivariant (and permutation-
equivariant: atom features sum over neighbours). ``W`` solves the ridge problem
``min ‖F W − Y‖² + λ‖W‖²`` on RMS-scaled feature columns (constant column for ``0e``). This is a linear
ACE/MTP-style tensor model; it captures the near-linear dependence of ``ΔH`` on ``H0`` and the bond
geometry in closed form, and the network learns what is left.
"""

from __future__ import annotations

import contextlib
import uuid

import torch
from torch import nn

from sciml.core.e3nn_o3 import o3


@contextlib.contextmanager
def _float64():
    """Build e3nn modules with float64 Clebsch–Gordan coefficients (restores the default dtype)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _index(irreps: o3.Irreps, key: tuple[int, int]) -> torch.Tensor:
    """``(mul, 2L+1)`` positions of every ``(L, p)`` instance in a vector of ``irreps``."""
    rows = []
    for (mul, ir), sl in zip(irreps, irreps.slices(), strict=True):
        if (ir.l, ir.p) == key:
            rows += [torch.arange(sl.start + u * ir.dim, sl.start + (u + 1) * ir.dim) for u in range(mul)]
    return torch.stack(rows) if rows else torch.zeros(0, 2 * key[0] + 1, dtype=torch.long)


class TensorProductRidge(nn.Module):
    """Closed-form equivariant ΔH model (see the module docstring).

    Parameters
    ----------
    node_irreps, edge_irreps : str
        On-site and off-site block irreps (inputs ``x`` and outputs alike).
    n_node_types, n_edge_types : int
        Element and element-pair counts.
    lmax : int
        Degree of the edge spherical harmonics.
    centres, width : list of float, float
        Radial Gaussians (Å).
    shapes : dict or None
        ``{name: n_features}`` of fitted weights (from :meth:`fit`), so a saved model rebuilds strictly.
    two_hop : bool
        Edges also see the atom features (neighbour sums) of both end atoms: second-neighbour environment.

    """

    def __init__(self, node_irreps: str, edge_irreps: str, n_node_types: int, n_edge_types: int, lmax: int = 2,
                 centres=(0.9, 1.5, 2.5, 3.5), width: float = 0.6, shapes: dict | None = None,
                 two_hop: bool = False, scale_floor: float = 0.0) -> None:
        super().__init__()
        self.node_irreps, self.edge_irreps = o3.Irreps(node_irreps), o3.Irreps(edge_irreps)
        self.sh = o3.Irreps.spherical_harmonics(lmax)
        with _float64():
            self.tp_node = o3.FullTensorProduct(self.node_irreps, self.sh)
            self.tp_edge = o3.FullTensorProduct(self.edge_irreps, self.sh)
        self.register_buffer("centres", torch.tensor(list(centres), dtype=torch.float64))
        self.width, self.n_types = float(width), {"node": n_node_types, "edge": n_edge_types}
        self.two_hop = bool(two_hop)
        self.scale_floor = float(scale_floor)
        self.shapes = dict(shapes or {})
        self.token = uuid.uuid4().hex  # a new one whenever weights are loaded: outputs stored under it are stale
        self.register_load_state_dict_post_hook(_new_token)
        for name, (n_feat, mul) in self.shapes.items():
            self.register_buffer(f"{name}_cols", torch.zeros(n_feat, dtype=torch.long))
            self.register_buffer(f"{name}_scale", torch.ones(n_feat, dtype=torch.float32))
            self.register_buffer(f"{name}_w", torch.zeros(n_feat, mul, dtype=torch.float32))

    @classmethod
    def from_settings(cls, node_basis, edge_basis, settings: dict) -> TensorProductRidge:
        """Model for node/edge ``BlockBasis`` objects from a settings dict (other keys, e.g. ``lam``, ignored)."""
        keys = ("lmax", "centres", "width", "shapes", "two_hop", "scale_floor")
        return cls(str(node_basis.irreps), str(edge_basis.irreps), len(node_basis.pairs), len(edge_basis.pairs),
                   **{k: settings[k] for k in keys if k in settings})

    def _blocks(self, x_node, x_edge, vec, edge_index):
        """Per-edge feature blocks ``[(f (E, D), irreps)]`` and radial weights ``(E, K)``."""
        i, j = edge_index
        y = o3.spherical_harmonics(self.sh, vec, normalize=True, normalization="component")
        radial = torch.exp(-(((vec.norm(dim=-1, keepdim=True) - self.centres) / self.width) ** 2))
        node_out = self.tp_node.irreps_out
        blocks = [(self.tp_edge(x_edge, y), self.tp_edge.irreps_out), (self.tp_node(x_node[i], y), node_out),
                  (self.tp_node(x_node[j], y), node_out)]
        return blocks, radial

    def features(self, kind: str, key, blocks, radial, edge_index, n_nodes: int) -> torch.Tensor:
        """``(n_items, 2L+1, n_features)`` features of output irrep ``key`` for ``kind`` = node or edge."""
        parts = []
        for f, irreps in blocks:
            idx = _index(irreps, key).to(f.device)
            if len(idx) == 0:
                continue
            a = f[:, idx]  # (E, mul, 2L+1)
            a = (a.unsqueeze(1) * radial[:, :, None, None]).flatten(1, 2)  # (E, K·mul, 2L+1)
            agg = torch.zeros(n_nodes, *a.shape[1:], dtype=a.dtype, device=a.device).index_add_(0, edge_index[0], a)
            if kind == "node":
                a = agg
            elif self.two_hop:  # the environments of both end atoms (second neighbours of the edge)
                parts += [agg[edge_index[0]].transpose(1, 2), agg[edge_index[1]].transpose(1, 2)]
            parts.append(a.transpose(1, 2))
        n = n_nodes if kind == "node" else radial.shape[0]
        if key == (0, 1):
            parts.append(torch.ones(n, 1, 1, dtype=radial.dtype, device=radial.device))
        return torch.cat(parts, dim=-1)

    @staticmethod
    def _name(kind: str, t: int, key: tuple[int, int]) -> str:
        """Weight name of item type ``t`` of ``kind`` (node or edge) and output irrep ``key`` = (L, p)."""
        return f"{kind}_{t}_{key[0]}{'e' if key[1] == 1 else 'o'}"

    def _names(self) -> list[str]:
        """Every possible weight name, in the fixed order of the fit (kind, output irrep, type)."""
        return [self._name(kind, t, key) for kind in ("node", "edge") for key, _, _ in self._out_keys(kind)
                for t in range(self.n_types[kind])]

    def _out_keys(self, kind: str):
        irreps = self.node_irreps if kind == "node" else self.edge_irreps
        return [((ir.l, ir.p), mul, sl) for (mul, ir), sl in zip(irreps, irreps.slices(), strict=True)]

    def forward(self, x_node, x_edge, vec, edge_index, node_type, edge_type):
        """ΔH irreps ``(N, Dn)``, ``(E, De)`` in Hartree (float64) from raw H0 irreps and edge vectors (Å)."""
        blocks, radial = self._blocks(x_node.double(), x_edge.double(), vec.double(), edge_index)
        out = {}
        for kind, types in (("node", node_type), ("edge", edge_type)):
            dim = (self.node_irreps if kind == "node" else self.edge_irreps).dim
            y = torch.zeros(len(types), dim, dtype=torch.float64, device=vec.device)
            for key, _, sl in self._out_keys(kind):
                names = [(t, self._name(kind, t, key)) for t in range(self.n_types[kind])]
                names = [(t, n) for t, n in names if n in self.shapes]
                if not names:
                    continue
                feats = self.features(kind, key, blocks, radial, edge_index, len(node_type))
                for t, name in names:
                    sel = (types == t).nonzero().flatten()
                    if len(sel) == 0:
                        continue
                    cols, scale, w = (getattr(self, f"{name}_{s}") for s in ("cols", "scale", "w"))
                    pred = (feats[sel][:, :, cols] / scale.double()) @ w.double()  # (n, 2L+1, mul)
                    y[sel, sl] = pred.transpose(1, 2).reshape(len(sel), -1)
            out[kind] = y
        return out["node"], out["edge"]

    @torch.no_grad()
    def fit(self, x_node, x_edge, vec, edge_index, node_type, edge_type, y_node, y_edge, masks,
            lam: float = 1e-6) -> dict:
        """Solve the ridge problems on training items; return ``shapes`` for the constructor.

        ``masks`` are ``(node, edge)`` bool ``(n_types, dim)`` of the output channels to fit (alive ones).
        One batch of items; :meth:`accumulate` over chunks, then :meth:`solve`, fits a training set of any size.
        """
        normal = self.accumulate({}, x_node, x_edge, vec, edge_index, node_type, edge_type, y_node, y_edge, masks)
        return self.solve(normal, lam)

    @torch.no_grad()
    def accumulate(self, normal: dict, x_node, x_edge, vec, edge_index, node_type, edge_type, y_node, y_edge,
                   masks) -> dict:
        """Add one chunk of training items to the normal equations ``normal`` (updated and returned).

        Per weight name: ``FᵀF`` ``(n_feat, n_feat)``, ``FᵀY`` ``(n_feat, mul)``, ``Σ F²`` ``(n_feat,)`` and the row
        count, float64, summed over the ``2L+1`` components of every item of that type.
        """
        blocks, radial = self._blocks(x_node.double(), x_edge.double(), vec.double(), edge_index)
        for kind, types, y, mask in (("node", node_type, y_node, masks[0]), ("edge", edge_type, y_edge, masks[1])):
            for key, mul, sl in self._out_keys(kind):
                feats = self.features(kind, key, blocks, radial, edge_index, len(node_type))
                for t in range(self.n_types[kind]):
                    sel = (types == t).nonzero().flatten()
                    if len(sel) == 0 or not mask[t, sl].any():
                        continue
                    a = feats[sel].reshape(-1, feats.shape[-1])
                    target = y[sel][:, sl].double().reshape(len(sel), mul, -1).transpose(1, 2).reshape(-1, mul)
                    name = self._name(kind, t, key)
                    terms = (a.T @ a, a.T @ target, a.pow(2).sum(0), torch.tensor(float(len(a)), dtype=a.dtype))
                    old = normal.get(name)
                    normal[name] = terms if old is None else tuple(u + v for u, v in zip(old, terms, strict=True))
        return normal

    @torch.no_grad()
    def solve(self, normal: dict, lam: float = 1e-6) -> dict:
        """Weights from the normal equations of :meth:`accumulate`; return ``shapes`` for the constructor.

        Columns are scaled to unit RMS over the training rows (at least ``scale_floor`` of the largest, so nearly
        dead columns keep their raw scale); dead columns (RMS ≤ 1e-12 of the largest) are dropped; then
        ``(D⁻¹FᵀFD⁻¹ + λI) w = D⁻¹FᵀY``.
        """
        fitted = {}
        for name in (n for n in self._names() if n in normal):
            ata, aty, sumsq, rows = normal[name]
            rms = (sumsq / rows).sqrt()
            cols = (rms > 1e-12 * rms.max()).nonzero().flatten()
            rms = rms.clamp_min(self.scale_floor * rms.max())[cols]
            gram = ata[cols][:, cols] / (rms[:, None] * rms[None, :])
            w = torch.linalg.solve(gram + lam * torch.eye(len(cols), dtype=gram.dtype), aty[cols] / rms[:, None])
            # stored in float32 (artifact size): relative 1e-7 of ΔH, far below the errors measured
            fitted[name] = (cols, rms.float(), w.float())
        self.shapes = {name: [len(c), int(w.shape[1])] for name, (c, _, w) in fitted.items()}
        for name, (cols, scale, w) in fitted.items():
            for suffix, value in (("cols", cols), ("scale", scale), ("w", w)):
                if hasattr(self, f"{name}_{suffix}"):
                    delattr(self, f"{name}_{suffix}")
                self.register_buffer(f"{name}_{suffix}", value.contiguous())
        _new_token(self, None)
        return {name: list(shape) for name, shape in self.shapes.items()}


def _new_token(ridge: TensorProductRidge, incompatible) -> None:
    """New weights (fitted, or loaded into the ridge or a model holding it): a new :attr:`TensorProductRidge.token`."""
    ridge.token = uuid.uuid4().hex
