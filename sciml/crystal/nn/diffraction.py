"""Reciprocal-space (diffraction) branch with learnable per-atom scattering factors.

Implements the diffraction half of PRDNet (ICLR 2026; ``docs/crystal.md``) with a Cromer–Mann form for
the learned "pseudo-particle" scattering factor.
"""

from __future__ import annotations

import bisect
import math

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch_geometric.nn import global_mean_pool

from sciml.core import keys
from sciml.core.allocator import release_freed_memory
from sciml.core.radial import CosineCutoff, GaussianBasis

#: Memory allowed for the (reflection, atom) pair tensors of one chunk, bytes. The pairs of a structure number
#: ``R N`` and ``R`` grows with the cell volume, so they grow as ``N²``; chunks over reflections keep memory flat.
PAIR_BUDGET_BYTES = 32 * 2**20
#: The same on a GPU, where memory is plentiful and each extra chunk costs a recomputation in the backward pass.
GPU_PAIR_BUDGET_BYTES = 2 * 2**30


def reflection_atom_pairs(n_refl: torch.Tensor, n_atoms: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """All (reflection, atom) pairs that belong to the same structure, without padding.

    Parameters
    ----------
    n_refl, n_atoms : torch.Tensor
        ``(n_graphs,)`` reflections and atoms per structure.

    Returns
    -------
    refl_graph : (n_refl_total,) structure index of each reflection.
    pair_refl, pair_atom : (n_pairs,) reflection and atom index of each pair, ``n_pairs = Σ_b R_b N_b``.

    """
    refl_graph = torch.repeat_interleave(torch.arange(len(n_refl), device=n_refl.device), n_refl)
    return (refl_graph, *_pairs(refl_graph, n_atoms, 0, len(refl_graph)))


def _pairs(refl_graph: torch.Tensor, n_atoms: torch.Tensor, start: int, stop: int) -> tuple[torch.Tensor, ...]:
    """``pair_refl, pair_atom`` of reflections ``start:stop`` (ordered by reflection, then atom)."""
    atom_ptr = torch.cumsum(n_atoms, 0) - n_atoms
    graph = refl_graph[start:stop]
    counts = n_atoms[graph]
    pair_refl = torch.repeat_interleave(torch.arange(start, stop, device=n_atoms.device), counts)
    first = torch.cumsum(counts, 0) - counts
    local = torch.arange(int(counts.sum()), device=n_atoms.device) - torch.repeat_interleave(first, counts)
    pair_atom = torch.repeat_interleave(atom_ptr[graph], counts) + local
    return pair_refl, pair_atom


def reflection_chunks(pairs_per_refl: torch.Tensor, max_pairs: int) -> list[tuple[int, int]]:
    """Split reflections into contiguous ranges ``(start, stop)`` of at most ``max_pairs`` pairs each.

    ``pairs_per_refl`` ``(R,)`` is the number of atoms each reflection pairs with; a range always holds at least
    one reflection, so one reflection of a structure larger than ``max_pairs`` atoms is a range of its own.
    """
    ends = torch.cumsum(pairs_per_refl, 0).tolist()
    chunks, start, offset = [], 0, 0
    while start < len(ends):
        stop = max(start + 1, bisect.bisect_right(ends, offset + max_pairs, lo=start))
        chunks.append((start, stop))
        offset, start = ends[stop - 1], stop
    return chunks


class DiffractionBranch(nn.Module):
    """Powder-diffraction fingerprint from learned scattering factors.

    For each structure with lattice ``L`` (rows, Å), fractional coordinates ``x_j = r_j L⁻¹`` and the
    reflections ``G = (h, k, l) B`` with ``B = 2π L⁻ᵀ`` and ``0 < |G| ≤ g_max``:

    - scattering factor (Cromer–Mann form, ``s = |G| / 4π``):
      ``f_j(s) = Σ_m a_jm exp(-b_jm s²) + c_j`` with ``(a_j, b_j, c_j) = MLP(h_j)``, ``b_jm > 0``;
    - structure factor ``F(G) = Σ_j f_j(|G|) exp(2πi (h,k,l)·x_j)``;
    - pattern ``P_k = (2π)³ / (N V) Σ_G w(|G|) |F(G)|² φ_k(|G|)`` with a cosine envelope ``w`` and
      Gaussian bins ``φ_k`` over |G|.

    ``|F|²`` is unchanged by a shift of the origin; a pattern over |G| is unchanged by rotation and atom
    order; the ``1/(N V)`` factor makes it identical for a cell and any supercell of it (the extra
    reflections of a supercell have ``F = 0``, the shared ones ``|F|²`` scaled by the square of the
    multiplicity). Smooth bins and envelope keep all of this exact up to rounding.

    Site-resolved variant (``site_resolved=True``): atom ``j``'s share of each intensity,
    ``|F(G)|² = Σ_j Re[conj(f_j e^{2πi (h,k,l)·x_j}) F(G)]``, binned the same way into a pattern per atom,
    ``P_jk = (2π)³ / V Σ_G w(|G|) Re[...] φ_k(|G|)`` (the mean over atoms is the pattern above). Shares can be
    negative (destructive interference), so they are embedded through ``asinh`` per atom and then mean-pooled;
    this gives each site its own view of the long-range order instead of one sum over the cell. The share is
    unchanged by a shift of the origin (both factors pick up the same phase), and for a supercell ``F`` and ``V``
    scale by the same multiplicity, so all invariances below hold per atom.

    Parameters
    ----------
    dim : int
        Width of the atom features ``h_j`` and of the output embedding.
    g_max : float
        Largest |G|, Å⁻¹ (must equal the value used to select the reflections).
    n_bins : int
        Number of Gaussian bins over |G|.
    n_gauss : int
        Number of Gaussians ``m`` in the scattering factor.
    site_resolved : bool
        Embed a pattern per atom (its interference share) instead of one per structure.

    """

    def __init__(self, dim: int, g_max: float, n_bins: int = 32, n_gauss: int = 4,
                 site_resolved: bool = False) -> None:
        super().__init__()
        self.n_gauss, self.site_resolved = n_gauss, site_resolved
        self.coeff = nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, 2 * n_gauss + 1))
        self.bins = GaussianBasis(0.0, g_max, n_bins)
        self.envelope = CosineCutoff(g_max)
        self.out = nn.Sequential(nn.LayerNorm(n_bins), nn.Linear(n_bins, dim), nn.SiLU(), nn.Linear(dim, dim))
        nn.init.zeros_(self.out[-1].weight)  # start as the graph-only model; the branch grows in if it helps
        nn.init.zeros_(self.out[-1].bias)

    def bytes_per_pair(self, dtype: torch.dtype) -> int:
        """Upper estimate of the memory one (reflection, atom) pair takes while its chunk is evaluated."""
        floats = 5 * self.n_gauss + 25 + (4 * self.bins.n if self.site_resolved else 0)
        return floats * torch.finfo(dtype).bits // 8 + 48  # + the int64 pair indices

    def scattering(self, coeff: tuple[torch.Tensor, ...], atom: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """Cromer–Mann factors ``f_j(s) = Σ_m a_jm exp(-b_jm s²) + c_j``, ``s = |G|/4π``.

        ``coeff`` ``(a, softplus(b), c)`` per atom from :meth:`coefficients`; ``atom`` and ``g`` ``(P,)``: atom
        index and |G| of each pair → ``(P,)``.
        """
        a, b, c = coeff
        s2 = (g / (4 * math.pi)) ** 2
        return (a[atom] * torch.exp(-b[atom] * s2.unsqueeze(-1))).sum(-1) + c[atom, 0]

    def coefficients(self, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(a, softplus(b), c)`` of the scattering factor of every atom, ``(n_atoms, n_gauss|n_gauss|1)``."""
        a, b, c = self.coeff(h).split([self.n_gauss, self.n_gauss, 1], dim=-1)
        return a, nn.functional.softplus(b), c

    def binned(self, values: torch.Tensor, g: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
        """``Σ w(|G|) v φ_k(|G|)`` of values ``v`` at ``|G|`` into rows ``index``: ``(size, n_bins)``."""
        weighted = (values * self.envelope(g)).unsqueeze(-1) * self.bins(g)
        return torch.zeros(size, weighted.shape[-1], dtype=values.dtype, device=values.device).index_add_(
            0, index, weighted)

    def _chunk(self, start: int, stop: int, coeff, g, hkl, frac, refl_graph, n_atoms):
        """Evaluate the pairs of reflections ``start:stop`` (one chunk).

        Returns ``(re F, im F)`` of those reflections, or with ``site_resolved`` the atoms' binned shares of their
        intensities ``(n_atoms, n_bins)`` (unscaled).
        """
        pair_refl, pair_atom = _pairs(refl_graph, n_atoms, start, stop)
        f = self.scattering(coeff, pair_atom, g[pair_refl])  # (P,) one factor per (reflection, atom) pair
        phase = 2 * math.pi * (hkl[pair_refl] * frac[pair_atom]).sum(-1)
        local = pair_refl - start
        re = torch.zeros_like(g[start:stop]).index_add_(0, local, f * torch.cos(phase))  # F(G), (stop - start,)
        im = torch.zeros_like(g[start:stop]).index_add_(0, local, f * torch.sin(phase))
        if not self.site_resolved:
            return re, im
        share = f * (torch.cos(phase) * re[local] + torch.sin(phase) * im[local])  # Re[conj(f_j e^{iφ_j}) F(G)]
        return self.binned(share, g[pair_refl], pair_atom, len(frac))

    def pattern(self, h: torch.Tensor, batch, budget: int | None = None) -> torch.Tensor:
        """Binned intensities: ``(n_graphs, n_bins)``, or ``(n_atoms, n_bins)`` per site if site-resolved.

        The (reflection, atom) pairs are evaluated in chunks of whole reflections holding at most ``budget``
        bytes (default :data:`PAIR_BUDGET_BYTES`; :data:`GPU_PAIR_BUDGET_BYTES` on a GPU); with gradients on,
        each chunk is recomputed in the backward
        pass instead of stored (activation checkpointing), so training memory is bounded the same way. A batch
        that fits in one chunk is computed in one pass.
        """
        pos, cell = batch[keys.POS], batch[keys.CELL]
        n_atoms, n_refl = batch[keys.N_ATOMS], batch[keys.N_REFL]
        inv_cell = torch.linalg.inv(cell)  # (B, 3, 3)
        frac = torch.einsum("nc,ncd->nd", pos, inv_cell[batch[keys.BATCH]])
        refl_graph = torch.repeat_interleave(torch.arange(len(n_refl), device=n_refl.device), n_refl)
        hkl = batch[keys.HKL].to(pos.dtype)
        g = torch.linalg.vector_norm(2 * math.pi * torch.einsum("rc,rdc->rd", hkl, inv_cell[refl_graph]), dim=-1)
        coeff = self.coefficients(h)
        if budget is None:
            budget = PAIR_BUDGET_BYTES if pos.device.type == "cpu" else GPU_PAIR_BUDGET_BYTES
        max_pairs = max(1, budget // self.bytes_per_pair(pos.dtype))
        chunks = reflection_chunks(n_atoms[refl_graph], max_pairs)
        parts, shares = [], None
        for start, stop in chunks:
            args = (start, stop, coeff, g, hkl, frac, refl_graph, n_atoms)
            if len(chunks) > 1 and torch.is_grad_enabled():
                part = checkpoint(self._chunk, *args, use_reentrant=False)
            else:
                part = self._chunk(*args)
            if len(chunks) > 1:
                release_freed_memory()
            if self.site_resolved:  # (n_atoms, n_bins) per chunk: summed as they come
                shares = part if shares is None else shares + part
            else:
                parts.append(part)
        scale = (2 * math.pi) ** 3 / torch.linalg.det(cell).abs()
        if self.site_resolved:
            return shares * scale[batch[keys.BATCH]].unsqueeze(-1)
        re = torch.cat([part[0] for part in parts])
        im = torch.cat([part[1] for part in parts])
        intensity = self.binned(re**2 + im**2, g, refl_graph, len(n_refl))
        return intensity * (scale / n_atoms.to(g.dtype)).unsqueeze(-1)

    def forward(self, h: torch.Tensor, batch) -> torch.Tensor:
        """Embed the pattern: ``(n_atoms, dim)`` atom features → ``(n_graphs, dim)``."""
        if not self.site_resolved:
            return self.out(torch.log1p(self.pattern(h, batch)))
        per_site = self.out(torch.asinh(self.pattern(h, batch)))  # shares can be negative (interference)
        return global_mean_pool(per_site, batch[keys.BATCH], size=len(batch[keys.N_ATOMS]))
