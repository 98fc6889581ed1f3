"""Equivariant building blocks of the Hamiltonian network (e3nn).

- :func:`gate_irreps` / :class:`GatedLinear`: linear map followed by e3nn's gated nonlinearity
  (Weiler et al. 2018): scalars go through SiLU, each higher-l channel is multiplied by a sigmoid gate.
- :class:`EdgeConvolution`: the NequIP/SE(3)-Transformer message ``m_ij = Σ_path w_path(r_ij) h_j ⊗ Y(r̂_ij)``
  (``uvu`` tensor product, weights from a radial MLP).
- :func:`split_linear`: e3nn's ``Linear`` evaluated with one ``split`` of its input (same weights, same result), as
  every Linear of the network is: e3nn's one ``narrow`` per irrep makes the backward pass zero-fill the whole input
  per irrep. :func:`tensor_product_linear` does the same for the convolution's tensor product and feeds each path
  straight into the Linear that follows it.
- :class:`Attention`: invariant attention weights over the incoming edges of each atom,
  ``α_ij = σ(MLP([s_i, s_j, φ_ij]))`` (Equiformer-lite: scalar weights, equivariant values; sigmoid rather
  than softmax so that the number of neighbours still shows in the sum, as in Matformer's gated attention).
"""

from __future__ import annotations

from functools import cache
from math import prod

import torch
from torch import nn

from sciml.core.e3nn_o3 import e3nn_nn, o3


def gate_irreps(irreps: o3.Irreps) -> tuple[o3.Irreps, o3.Irreps, o3.Irreps]:
    """Split ``irreps`` into (scalars ``0e``, gates ``n×0e``, gated non-scalars) for :class:`e3nn.nn.Gate`."""
    irreps = o3.Irreps(irreps).simplify()
    scalars = o3.Irreps([(m, ir) for m, ir in irreps if ir.l == 0 and ir.p == 1])
    gated = o3.Irreps([(m, ir) for m, ir in irreps if not (ir.l == 0 and ir.p == 1)])
    return scalars, o3.Irreps(f"{gated.num_irreps}x0e") if gated.num_irreps else o3.Irreps(""), gated


def _pieces(x: torch.Tensor, irreps: o3.Irreps) -> list[torch.Tensor]:
    """``x (n, irreps.dim)`` cut by one ``split`` into ``(n, mul, 2l+1)`` pieces, one per entry of ``irreps``."""
    n = x.shape[0]
    return [p.reshape(n, mi.mul, mi.ir.dim) for p, mi in zip(x.split([mi.dim for mi in irreps], dim=-1), irreps,
                                                               strict=True)]


def _linear_of_pieces(linear: o3.Linear, pieces: list[torch.Tensor], n: int, like: torch.Tensor) -> torch.Tensor:
    """e3nn ``Linear`` (no biases) of an input given as :func:`_pieces` of ``linear.irreps_in``: ``(n, out)``."""
    if any(ins.i_in == -1 for ins in linear.instructions):
        raise ValueError("an e3nn Linear with biases is not supported here; call the Linear itself")
    outs: list[list[torch.Tensor]] = [[] for _ in linear.irreps_out]
    at = 0
    for ins in (i for i in linear.instructions if 0 not in i.path_shape):  # e3nn skips these, weights included
        size = prod(ins.path_shape)
        w, at = linear.weight[at:at + size].reshape(ins.path_shape), at + size
        if linear.irreps_in[ins.i_in].dim and linear.irreps_out[ins.i_out].dim:
            out = torch.einsum("uw,zui->zwi", w, pieces[ins.i_in])
            outs[ins.i_out].append(ins.path_weight * out.reshape(n, linear.irreps_out[ins.i_out].dim))
    return torch.cat([sum(o) if o else like.new_zeros(n, mi.dim)
                      for o, mi in zip(outs, linear.irreps_out, strict=True) if mi.mul > 0], dim=-1)


def split_linear(linear: o3.Linear, x: torch.Tensor) -> torch.Tensor:
    """``linear(x)`` for ``x (n, irreps_in.dim)``, with the input cut into its irreps by one ``split``.

    e3nn's ``Linear`` takes each input irrep with ``narrow``, whose backward allocates and zero-fills a gradient
    the size of the whole input; on the (edges, 7104) tensor-product output of a QM9 batch that is 300 fills of
    52 MB per training step, most of the step. The backward of one ``split`` is one concatenation. Same flat
    weight layout and path weights (the instructions of ``linear``), so a trained ``Linear`` is evaluated as is.
    """
    return _linear_of_pieces(linear, _pieces(x, linear.irreps_in), x.shape[0], x)


@cache
def _w3j(l1: int, l2: int, l3: int) -> torch.Tensor:
    """e3nn's Wigner 3j symbol ``(2l1+1, 2l2+1, 2l3+1)`` in float64 (the coupling its tensor products use)."""
    return o3.wigner_3j(l1, l2, l3, dtype=torch.float64)


def _coupling(tp: o3.TensorProduct, l1: int, l2: int, l3: int) -> torch.Tensor:
    """The Wigner 3j constant ``tp`` itself holds for path ``(l1, l2 → l3)``, else :func:`_w3j`.

    e3nn computes its constants once, in the default dtype of the moment the module is built (float32 unless set),
    and casts them with the module: a float64 model built the usual way carries float32-rounded constants (1e-8),
    which its trained weights were fitted with. Reading them keeps such a model's numbers exactly.
    """
    held = getattr(getattr(tp, "_compiled_main_left_right", None), f"_w3j_{l1}_{l2}_{l3}", None)
    return held if isinstance(held, torch.Tensor) else _w3j(l1, l2, l3)


def tensor_product_linear(tp: o3.TensorProduct, linear: o3.Linear, x1: torch.Tensor, x2: torch.Tensor,
                          weight: torch.Tensor) -> torch.Tensor:
    """``linear(tp(x1, x2, weight))`` without the tensor product's output ever being one tensor.

    ``tp``: ``uvu`` paths with per-item weights ``weight (n, tp.weight_numel)`` and ``x2`` of multiplicity 1 (the
    spherical harmonics of the edge). Path ``(l1, l2 → l)``: ``out_zuk = α w_zu Σ_ij C_ijk x1_zui x2_zj``, with e3nn's
    path weight ``α`` and Wigner 3j ``C`` (the same sum as e3nn's generated code). Each path's output goes straight
    into ``linear``'s matrix: the (edges, 7104) tensor-product output is never concatenated and split again, and
    inputs and weights are cut by one ``split`` each (e3nn narrows them once per path, and each narrow's backward
    zero-fills a gradient of the whole tensor).
    """
    if any(ins.connection_mode != "uvu" or not ins.has_weight for ins in tp.instructions) or any(
            mi.mul != 1 for mi in tp.irreps_in2):
        raise ValueError("tensor_product_linear: only weighted 'uvu' paths with a multiplicity-1 second input")
    n = x1.shape[0]
    p1, p2 = _pieces(x1, tp.irreps_in1), _pieces(x2, tp.irreps_in2)
    weights = weight.split([prod(ins.path_shape) for ins in tp.instructions], dim=-1)
    pieces: list[torch.Tensor | None] = [None] * len(tp.irreps_out)
    for ins, w in zip(tp.instructions, weights, strict=True):
        l1, l2, lo = tp.irreps_in1[ins.i_in1].ir.l, tp.irreps_in2[ins.i_in2].ir.l, tp.irreps_out[ins.i_out].ir.l
        coupling = torch.einsum("zj,ijk->zik", p2[ins.i_in2][:, 0], _coupling(tp, l1, l2, lo).to(x1))  # (n, d1, dk)
        out = torch.bmm(p1[ins.i_in1], coupling) * (ins.path_weight * w).unsqueeze(-1)  # (n, mul, 2l+1)
        pieces[ins.i_out] = out if pieces[ins.i_out] is None else pieces[ins.i_out] + out
    pieces = [p if p is not None else x1.new_zeros(n, mi.mul, mi.ir.dim)
              for p, mi in zip(pieces, tp.irreps_out, strict=True)]
    return _linear_of_pieces(linear, pieces, n, x1)


class GatedLinear(nn.Module):
    """``Gate(Linear(x))``: irreps_in → irreps_out with a gated nonlinearity; ``irreps_out`` must hold ``0e``."""

    def __init__(self, irreps_in, irreps_out) -> None:
        super().__init__()
        scalars, gates, gated = gate_irreps(irreps_out)
        self.gate = e3nn_nn.Gate(scalars, [nn.functional.silu], gates, [torch.sigmoid], gated)
        self.linear = o3.Linear(irreps_in, self.gate.irreps_in)
        self.irreps_in, self.irreps_out = o3.Irreps(irreps_in), self.gate.irreps_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(n, irreps_in.dim)`` → ``(n, irreps_out.dim)``."""
        return self.gate(split_linear(self.linear, x))


class EdgeConvolution(nn.Module):
    """``m_ij = Linear(Σ_path w_path(φ_ij) · (h_j ⊗ Y(r̂_ij))_path)``, paths restricted to ``irreps_out``.

    Parameters
    ----------
    irreps_in, irreps_sh, irreps_out : e3nn irreps
        Node features, spherical harmonics of the edge direction, output features.
    n_invariants : int
        Length of the per-edge invariant vector ``φ_ij`` (radial basis, edge scalars) feeding the weights.
    hidden : int
        Width of the radial MLP.

    """

    def __init__(self, irreps_in, irreps_sh, irreps_out, n_invariants: int, hidden: int = 64) -> None:
        super().__init__()
        irreps_in, irreps_sh, irreps_out = o3.Irreps(irreps_in), o3.Irreps(irreps_sh), o3.Irreps(irreps_out)
        mid, instructions = [], []
        for i, (mul, ir_in) in enumerate(irreps_in):
            for j, (_, ir_sh) in enumerate(irreps_sh):
                for ir in ir_in * ir_sh:
                    if ir in irreps_out:
                        instructions.append((i, j, len(mid), "uvu", True))
                        mid.append((mul, ir))
        self.tp = o3.TensorProduct(irreps_in, irreps_sh, o3.Irreps(mid), instructions,
                                   shared_weights=False, internal_weights=False)
        self.radial = nn.Sequential(nn.Linear(n_invariants, hidden), nn.SiLU(), nn.Linear(hidden, self.tp.weight_numel))
        self.linear = o3.Linear(self.tp.irreps_out, irreps_out)
        self.irreps_out = irreps_out

    def forward(self, h_src: torch.Tensor, sh: torch.Tensor, invariants: torch.Tensor) -> torch.Tensor:
        """``(E, in) × (E, sh) × (E, n_invariants)`` → ``(E, out)``."""
        return tensor_product_linear(self.tp, self.linear, h_src, sh, self.radial(invariants))


class Attention(nn.Module):
    """Per-head weights of each atom's incoming edges from invariant features.

    ``α_ij^h = σ(MLP([s_i, s_j, φ_ij])_h)``, or a softmax over ``j ∈ N(i)`` when ``softmax=True``;
    returns ``(E, heads)``.
    """

    def __init__(self, n_scalars: int, n_invariants: int, heads: int = 1, hidden: int = 32,
                 softmax: bool = False) -> None:
        super().__init__()
        self.softmax = softmax
        self.mlp = nn.Sequential(nn.Linear(2 * n_scalars + n_invariants, hidden), nn.SiLU(), nn.Linear(hidden, heads))

    def forward(self, s: torch.Tensor, invariants: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        dst, src = edge_index
        logits = self.mlp(torch.cat([s[dst], s[src], invariants], dim=-1))
        if self.softmax:
            from torch_geometric.utils import softmax  # here: importing torch_geometric is slow at start-up

            return softmax(logits, dst, num_nodes=s.shape[0], dim=0)
        return torch.sigmoid(logits)
