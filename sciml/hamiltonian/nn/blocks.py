"""Orbital blocks <-> irreps: the Clebsch–Gordan change of basis of ``l_a ⊗ l_b`` (docs/design.md §3).

A block between an atom with shells ``(l_a, ...)`` and an atom with shells ``(l_b, ...)`` is a sum of
``(2l_a+1)×(2l_b+1)`` sub-blocks, one per shell pair. Each sub-block decomposes into irreps
``L = |l_a − l_b| … l_a + l_b`` of parity ``(−1)^(l_a + l_b)``:

    B[m_a, m_b] = Σ_L Σ_M  √(2L+1) C^{l_a l_b L}[m_a, m_b, M] x^L_M,

with ``C`` = :func:`e3nn.o3.wigner_3j` (Frobenius norm 1), so the map ``x ↦ vec(B)`` is orthonormal and
``D^{l_a}(Q) B D^{l_b}(Q)ᵀ`` corresponds to ``x^L ↦ D^L(Q) x^L`` (equivariant in e3nn's real basis).

:class:`BlockBasis` fixes one irreps layout shared by every element pair (the channel count of each irrep is
the largest any pair needs) and stores, per pair ``(z_i, z_j)``, the dense matrix ``M`` with
``vec(B) = M x`` and ``x = Mᵀ vec(B)`` (rows of ``M`` are orthonormal on the channels the pair uses).
"""

from __future__ import annotations

from collections import Counter

import torch

from sciml.core.e3nn_o3 import o3


def shell_pair_irreps(la: int, lb: int) -> list[tuple[int, int]]:
    """Irreps ``(L, parity)`` of ``l_a ⊗ l_b`` for orbital shells (parity of an l shell is ``(−1)^l``)."""
    p = (-1) ** (la + lb)
    return [(L, p) for L in range(abs(la - lb), la + lb + 1)]


class BlockBasis:
    """Change of basis between orbital blocks and a shared irreps vector, for a set of element pairs.

    Parameters
    ----------
    shells : dict
        ``{Z: (l, ...)}`` shells of each element in e3nn orbital order (basis-set order).
    pairs : list of (int, int)
        Element pairs ``(z_i, z_j)`` this basis serves (on-site: ``(z, z)``).

    Attributes
    ----------
    irreps : e3nn.o3.Irreps
        Shared irreps layout (sorted, simplified), dimension ``dim``.
    pairs : list of (int, int)
        The pairs, in the order used by :meth:`pair_index`.

    """

    def __init__(self, shells: dict[int, tuple[int, ...]], pairs: list[tuple[int, int]]) -> None:
        self.shells = {int(z): tuple(int(l) for l in ls) for z, ls in shells.items()}
        self.pairs = [(int(a), int(b)) for a, b in pairs]
        need = Counter()
        for za, zb in self.pairs:
            count = Counter(ir for la in self.shells[za] for lb in self.shells[zb] for ir in shell_pair_irreps(la, lb))
            for ir, n in count.items():
                need[ir] = max(need[ir], n)
        keys = sorted(need, key=lambda ir: (ir[0], -ir[1]))
        self.irreps = o3.Irreps([(need[ir], ir) for ir in keys])
        self.dim = self.irreps.dim
        starts, s = {}, 0
        for ir in keys:
            starts[ir] = s
            s += need[ir] * (2 * ir[0] + 1)
        self._starts = starts
        self.matrices = {pair: self._matrix(*pair) for pair in self.pairs}

    def _matrix(self, za: int, zb: int) -> torch.Tensor:
        """``M`` of shape ``(n_a·n_b, dim)``, float64, with ``vec(B) = M x`` (row-major ``vec``)."""
        la_s, lb_s = self.shells[za], self.shells[zb]
        na, nb = sum(2 * l + 1 for l in la_s), sum(2 * l + 1 for l in lb_s)
        m = torch.zeros(na, nb, self.dim, dtype=torch.float64)
        used = Counter()
        oa = 0
        for la in la_s:
            ob = 0
            for lb in lb_s:
                for L, p in shell_pair_irreps(la, lb):
                    start = self._starts[(L, p)] + used[(L, p)] * (2 * L + 1)
                    used[(L, p)] += 1
                    cg = o3.wigner_3j(la, lb, L, dtype=torch.float64) * (2 * L + 1) ** 0.5
                    m[oa:oa + 2 * la + 1, ob:ob + 2 * lb + 1, start:start + 2 * L + 1] = cg
                ob += 2 * lb + 1
            oa += 2 * la + 1
        return m.reshape(na * nb, self.dim)

    def pair_index(self, za: int, zb: int) -> int:
        """Index of the pair ``(za, zb)`` in :attr:`pairs` (the type id used by the network)."""
        try:
            return self.pairs.index((int(za), int(zb)))
        except ValueError:
            raise ValueError(f"element pair ({za}, {zb}) is not in the trained orbital basis "
                             f"(pairs: {self.pairs})") from None

    def mask(self, za: int, zb: int) -> torch.Tensor:
        """Boolean ``(dim,)``: the irreps components the pair ``(za, zb)`` uses."""
        return self.matrices[(za, zb)].abs().sum(0) > 0

    def to_irreps(self, blocks: torch.Tensor, za: int, zb: int) -> torch.Tensor:
        """Blocks ``(..., n_a, n_b)`` → irreps ``(..., dim)`` (zero on unused channels)."""
        m = self.matrices[(za, zb)].to(blocks)
        return blocks.reshape(*blocks.shape[:-2], -1) @ m

    def to_blocks(self, x: torch.Tensor, za: int, zb: int) -> torch.Tensor:
        """Irreps ``(..., dim)`` → blocks ``(..., n_a, n_b)``."""
        m = self.matrices[(za, zb)].to(x)
        na = sum(2 * l + 1 for l in self.shells[za])
        return (x @ m.T).reshape(*x.shape[:-1], na, -1)

    def to_dict(self) -> dict:
        return {"shells": {str(z): list(ls) for z, ls in self.shells.items()}, "pairs": [list(p) for p in self.pairs]}

    @classmethod
    def from_dict(cls, data: dict) -> BlockBasis:
        return cls({int(z): tuple(ls) for z, ls in data["shells"].items()}, [tuple(p) for p in data["pairs"]])
