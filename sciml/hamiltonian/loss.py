"""Assembly of predicted blocks into symmetric matrices, orbital energies, and the training loss.

Real space: MSE of normalised block irreps (= a weighted block MSE, the CG map being orthonormal) and MAE of
matrix entries. Reciprocal space (molecules: the Γ point): orbital energies ε of ``H C = S C ε`` from

    X = S^{-1/2} (Löwdin),   ε = eigvalsh(X H X)        (n_occupied + n_virtual lowest),

differentiable through ``torch.linalg.eigvalsh`` (the loss sees eigenvalues only, never eigenvectors, so
near-degenerate levels give finite gradients). NextHAM uses a projected variant.
Density (molecules, optional): the first-order change of the occupied density, the occupied–virtual block of the
error weighted by the inverse gap (:func:`density_error`).
"""

from __future__ import annotations

import torch

from sciml.hamiltonian.nn.blocks import BlockBasis


def _scatter_blocks(flat, values, types, rows_atom, cols_atom, graph, batch, basis: BlockBasis):
    """Add the blocks of ``values (n, dim)`` (irreps, Hartree) into the flattened matrices ``flat``."""
    for t, (za, zb) in enumerate(basis.pairs):
        sel = (types == t).nonzero().flatten()
        if len(sel) == 0:
            continue
        blocks = basis.to_blocks(values[sel], za, zb)  # (m, na, nb)
        na, nb = blocks.shape[1:]
        n = batch.n_ao[graph[sel]]
        r = batch.ao_offset[rows_atom[sel]][:, None] + torch.arange(na, device=flat.device)
        c = batch.ao_offset[cols_atom[sel]][:, None] + torch.arange(nb, device=flat.device)
        idx = batch.mat_ptr[graph[sel]][:, None, None] + r[:, :, None] * n[:, None, None] + c[:, None, :]
        flat = flat.index_add(0, idx.reshape(-1), blocks.reshape(-1))
    return flat


def transpose_index(batch) -> torch.Tensor:
    """``(F,)`` index with ``flat[transpose_index] = vec(Mᵀ)`` for every graph's flattened matrix."""
    parts = []
    for g, n in enumerate(batch.n_ao.tolist()):
        parts.append(batch.mat_ptr[g] + torch.arange(n * n, device=batch.n_ao.device).reshape(n, n).T.reshape(-1))
    return torch.cat(parts)


def assemble(node_irreps, edge_irreps, batch, node_basis: BlockBasis, edge_basis: BlockBasis,
             base: torch.Tensor | None = None) -> torch.Tensor:
    """Symmetric matrices ``base + (B + Bᵀ)/2`` from on-site and off-site irreps, flattened ``(F,)`` float64.

    ``B`` holds the on-site block of every atom and the block ``B_ij`` of every edge ``(i, j)``; with both
    directions present, ``H_ij = (B_ij + B_jiᵀ)/2``. Pairs without an edge keep ``base`` (H0 or zero).
    """
    flat = torch.zeros(int(batch.mat_ptr[-1]), dtype=torch.float64, device=node_irreps.device)
    atoms = torch.arange(len(batch.z), device=flat.device)
    flat = _scatter_blocks(flat, node_irreps.double(), batch.node_type, atoms, atoms, batch.batch, batch, node_basis)
    i, j = batch.edge_index
    flat = _scatter_blocks(flat, edge_irreps.double(), batch.edge_type, i, j, batch.batch[i], batch, edge_basis)
    flat = 0.5 * (flat + flat[transpose_index(batch)])
    return flat if base is None else base + flat


def overlap_filter(delta_flat: torch.Tensor, batch, tau: float) -> torch.Tensor:
    """Drop the part of a predicted correction ``ΔH`` that lies on near-null directions of the overlap ``S``.

    With ``S = U diag(s) Uᵀ`` and ``P = Σ_{s_k > τ} u_k u_kᵀ``, returns ``P ΔH P`` per graph, flattened ``(F,)``.
    An error ``δ`` in ``H`` reaches the orthogonalised matrix ``S^{-1/2} H S^{-1/2}`` as ``δ_kl / √(s_k s_l)``
    in S's eigenbasis, so a small block error along a direction with ``s_k ≈ 10⁻³`` (diffuse functions on
    neighbouring atoms; S's condition number is ~10⁴ for uracil in def2-SVP) moves orbital energies by tens
    of eV. ``P`` is built from ``S`` alone, which rotates with the molecule, so the filter keeps the model's
    equivariance (as long as ``τ`` does not cut through a degenerate eigenvalue of S). ``H0`` itself is not
    filtered: only the learned correction.
    """
    out = []
    for g, n in enumerate(batch.n_ao.tolist()):
        a, b = int(batch.mat_ptr[g]), int(batch.mat_ptr[g + 1])
        w, u = torch.linalg.eigh(batch.s[a:b].reshape(n, n).to(delta_flat))
        keep = u[:, w > tau]
        proj = keep @ keep.T
        out.append((proj @ delta_flat[a:b].reshape(n, n) @ proj).reshape(-1))
    return torch.cat(out) if out else delta_flat


def orbital_energies(h_flat: torch.Tensor, batch) -> torch.Tensor:
    """The ``n_eig`` lowest eigenvalues of ``H C = S C ε`` per graph, concatenated ``(K,)`` (Hartree)."""
    out = []
    for g, (n, k) in enumerate(zip(batch.n_ao.tolist(), batch.n_eig.tolist(), strict=True)):
        a, b = int(batch.mat_ptr[g]), int(batch.mat_ptr[g + 1])
        h, x = h_flat[a:b].reshape(n, n), batch.s_inv_half[a:b].reshape(n, n)
        out.append(torch.linalg.eigvalsh(x @ h @ x)[:k])
    return torch.cat(out) if out else h_flat.new_zeros(0)


def density_error(h_flat: torch.Tensor, ref_flat: torch.Tensor, batch) -> torch.Tensor:
    r"""Squared first-order error of the closed-shell density, ``‖δD‖²_F`` per graph ``(G,)`` (electrons²).

    In the Löwdin basis (``X = S^{-1/2}``) the reference ``X H_ref X = U diag(ε) Uᵀ`` has occupied orbitals
    ``u_i`` (the ``n_occ`` lowest) and virtual ``u_a``. An error ``δ = X (H − H_ref) X`` moves the density
    ``D = 2 Σ_i u_i u_iᵀ`` to first order (Rayleigh–Schrödinger) by

        δD = 2 Σ_{i,a} κ_ia (u_i u_aᵀ + u_a u_iᵀ),    κ_ia = −(Uᵀ δ U)_ia / (ε_a − ε_i),

    so ``‖δD‖²_F = 8 Σ_ia κ_ia²``. Only the occupied–virtual block of the error counts, weighted by the inverse
    gap: the part of an H error that changes the density, which the Fock build of a self-consistent refinement
    (:mod:`sciml.hamiltonian.scf.refine`) turns back into H errors. The reference orbitals carry no gradient; the
    closed-shell gap keeps the weights finite, and degenerate occupied (or virtual) levels do not enter.
    """
    out = []
    for g, (n, occ) in enumerate(zip(batch.n_ao.tolist(), batch.n_occ.tolist(), strict=True)):
        a, b = int(batch.mat_ptr[g]), int(batch.mat_ptr[g + 1])
        x = batch.s_inv_half[a:b].reshape(n, n).to(h_flat)
        ref = ref_flat[a:b].reshape(n, n).to(h_flat)
        with torch.no_grad():
            eps, u = torch.linalg.eigh(x @ ref @ x)
            gap = eps[occ:][None, :] - eps[:occ][:, None]  # (occ, n − occ), > 0 for a closed shell
        delta = x @ (h_flat[a:b].reshape(n, n) - ref) @ x
        kappa = (u[:, :occ].T @ delta @ u[:, occ:]) / gap
        out.append(8.0 * (kappa ** 2).sum())
    return torch.stack(out) if out else h_flat.new_zeros(0)


def matrix_mae(h_flat: torch.Tensor, ref_flat: torch.Tensor, batch) -> torch.Tensor:
    """Mean absolute error over all matrix entries, per graph ``(G,)`` (Hartree)."""
    err = (h_flat - ref_flat).abs()
    graph = torch.repeat_interleave(torch.arange(len(batch.n_ao), device=err.device), batch.n_ao ** 2)
    return torch.zeros(len(batch.n_ao), dtype=err.dtype, device=err.device).index_add(0, graph, err) / batch.n_ao ** 2


def gauge_shift(h_flat: torch.Tensor, ref_flat: torch.Tensor, batch) -> torch.Tensor:
    """Per-graph ``μ = ⟨H_pred − H_ref, S⟩ / ⟨S, S⟩`` (docs/hamiltonian.md, "Metrics"), expanded to ``(F,)``."""
    graph = torch.repeat_interleave(torch.arange(len(batch.n_ao), device=h_flat.device), batch.n_ao ** 2)
    zeros = torch.zeros(len(batch.n_ao), dtype=h_flat.dtype, device=h_flat.device)
    num = zeros.index_add(0, graph, (h_flat - ref_flat) * batch.s)
    den = zeros.index_add(0, graph, batch.s * batch.s)
    return (num / den)[graph]


def hamiltonian_loss(pred_norm: tuple, target_norm: tuple, masks: tuple, eps_pred: torch.Tensor | None,
                     eps_ref: torch.Tensor, weights: dict, component_weights: tuple | None = None,
                     density: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Weighted sum of the real-space term, the orbital-energy term and (optionally) the density term.

    Parameters
    ----------
    pred_norm : tuple
        (node, edge) normalised predicted irreps ``(N, Dn)``, ``(E, De)``.
    target_norm : tuple
        Same for the target.
    masks : tuple
        (node, edge) bool masks of the components each item uses.
    eps_pred : torch.Tensor or None
        ``(K,)`` predicted orbital energies, Hartree (None skips the term).
    eps_ref : torch.Tensor
        ``(K,)`` reference orbital energies, Hartree.
    weights : dict
        ``real`` (weight of the normalised block MSE), ``eig`` (weight of the orbital-energy MSE) and
        ``eig_scale`` (Hartree unit of that MSE, default 1e-3).
    component_weights : tuple, optional
        (node, edge) weights of each squared component, shaped like ``masks`` (see :func:`channel_weights`);
        None weighs every normalised component alike.
    density : torch.Tensor, optional
        ``(G,)`` squared first-order density errors (:func:`density_error`), electrons²; their mean is weighted by
        ``weights["density"]`` (default 0: the term is off).

    Returns
    -------
    dict with ``loss``, ``real``, ``eig``, ``density`` (scalars).

    """
    cw = component_weights or (1.0, 1.0)
    real = sum(((p - t) ** 2 * w)[m].sum() for p, t, m, w in zip(pred_norm, target_norm, masks, cw, strict=True))
    real = real / sum(m.sum() for m in masks).clamp_min(1)
    eig = torch.zeros((), dtype=torch.float64, device=real.device)
    if eps_pred is not None and weights.get("eig", 0) > 0:
        eig = (((eps_pred - eps_ref) / weights.get("eig_scale", 1e-3)) ** 2).mean()
    dens = density.mean() if density is not None and len(density) else torch.zeros_like(eig)
    loss = weights.get("real", 1.0) * real + weights.get("eig", 0.0) * eig + weights.get("density", 0.0) * dens
    return {"loss": loss, "real": real.detach(), "eig": eig.detach(), "density": dens.detach()}


def channel_weights(stds: tuple, power: float) -> tuple[torch.Tensor, ...]:
    """Per-type, per-component weights ``(σ/σ̄)^power`` of the normalised squared errors.

    The normalised block MSE weighs every irrep instance alike whatever its scale ``σ`` (Hartree); the matrix
    MAE used for model selection weighs them by ``σ``. ``power = 2`` turns the loss into the MSE in Hartree²
    (up to a constant), ``1`` lies halfway, ``0`` is the plain normalised MSE. ``σ̄`` makes the mean weight over
    the live channels of all ``stds`` (node, edge) equal to 1 (dead channels, ``σ = 0``, get 0).

    Parameters
    ----------
    stds : tuple
        ``(n_types, dim)`` training scales per normaliser (:class:`~sciml.hamiltonian.nn.normalize.IrrepsNormalizer`).
    power : float
        Exponent of the scale.

    """
    scaled = [torch.where(s > 0, s.clamp_min(1e-300) ** power, torch.zeros_like(s)) for s in stds]
    alive = torch.cat([w[s > 0] for w, s in zip(scaled, stds, strict=True)])
    mean = alive.mean() if len(alive) else torch.ones(())
    return tuple(w / mean for w in scaled)


def crystal_bands(h_node: torch.Tensor, h_edge: torch.Tensor, setup: dict, node_basis: BlockBasis,
                  edge_basis: BlockBasis) -> torch.Tensor:
    """Lowest ``n_bands`` band energies ``(n_k, n_bands)`` (Hartree) of one crystal's H irreps, differentiable.

    The blocks are scattered into dense ``H(R)`` and symmetrised with their partners,
    ``H_ij(R) = ½ (B_ij(R) + B_ji(−R)ᵀ)`` (as :func:`sciml.hamiltonian.data.crystal.structure_from_irreps`),
    Bloch-summed, ``H(k) = Σ_R e^{2πi k·R} H(R)``, and ``ε = eigvalsh(S^{-1/2} H S^{-1/2})`` at the setup's k-points
    (``setup`` from :func:`sciml.hamiltonian.data.crystal.band_setup`; ``h_node (N, Dn)``, ``h_edge (E, De)``).
    """
    from sciml.hamiltonian.periodic import band_energies_torch, bloch_sum_torch

    n, n_r = setup["n"], len(setup["R"])
    flat = h_node.new_zeros(n_r * n * n)
    for kind, sel, idx, za, zb in setup["scatter"]:
        x = (h_node if kind == 0 else h_edge)[sel]
        flat = flat.index_add(0, idx, (node_basis if kind == 0 else edge_basis).to_blocks(x, za, zb).reshape(-1))
    b = torch.cat([flat.view(n_r, n, n), flat.new_zeros(1, n, n)])
    hr = (b[:-1] + b[setup["neg"]].transpose(-1, -2)) / setup["count"]
    hk = bloch_sum_torch(setup["R"], hr, setup["kpts"])
    return band_energies_torch(hk, setup["sk"])[:, : setup["n_bands"]]


def block_mae(err_node: torch.Tensor, err_edge: torch.Tensor, node_type: torch.Tensor, edge_type: torch.Tensor,
              node_basis: BlockBasis, edge_basis: BlockBasis) -> torch.Tensor:
    """Mean absolute error over all block entries (Hartree) from irreps errors ``(N, Dn)``, ``(E, De)``."""
    total, count = err_node.new_zeros(()), 0
    for err, types, basis in ((err_node, node_type, node_basis), (err_edge, edge_type, edge_basis)):
        for t, (za, zb) in enumerate(basis.pairs):
            sel = (types == t).nonzero().flatten()
            if len(sel):
                blocks = basis.to_blocks(err[sel], za, zb)
                total, count = total + blocks.abs().sum(), count + blocks.numel()
    return total / max(count, 1)
