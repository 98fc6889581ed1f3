"""Assembly, orbital energies and the Hamiltonian loss on a synthetic molecule (no pyscf, no shared data).

Exact identities: assembling the reference irreps reproduces H (orthonormal CG basis, ~1e-13); the orbital
energies of the reference H equal the stored ones, so the eigenvalue term vanishes at the truth; gradients
through ``eigvalsh`` stay finite for exactly degenerate levels; the gauge shift recovers a pure μS offset.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.linalg import eigh

from sciml.hamiltonian.data.datamodule import bases, collate, structure_to_sample
from sciml.hamiltonian.loss import (
    assemble,
    channel_weights,
    density_error,
    gauge_shift,
    hamiltonian_loss,
    matrix_mae,
    orbital_energies,
)
from sciml.hamiltonian.orbitals import OrbitalLayout
from sciml.hamiltonian.structure import HamiltonianStructure

LAYOUT = OrbitalLayout({8: (0, 0, 1, 2), 1: (0, 1)})
NUMBERS = np.array([8, 1, 1])


def sample(seed: int, degenerate: bool = False):
    rng = np.random.default_rng(seed)
    n = int(LAYOUT.atom_offsets(NUMBERS)[-1])
    pos = np.array([[0.0, 0.0, 0.1], [0.0, 0.78, -0.45], [0.05, -0.74, -0.47]]) + rng.normal(scale=0.05, size=(3, 3))
    a = rng.normal(size=(n, n))
    b = rng.normal(scale=0.1, size=(n, n))
    s = np.eye(n) + 0.5 * (b + b.T) / n
    h = a + a.T
    if degenerate:  # H = S^{1/2} diag(ε) S^{1/2} with a triply degenerate lowest level
        w, v = np.linalg.eigh(s)
        root = (v * np.sqrt(w)) @ v.T
        eps = np.sort(rng.normal(size=n))
        eps[:3] = -2.0
        q, _ = np.linalg.qr(rng.normal(size=(n, n)))
        h = root @ q @ np.diag(eps) @ q.T @ root
    h0 = h + 0.1 * s + 0.01 * (a - a.T) @ (a - a.T).T / n
    st = HamiltonianStructure.from_dense(NUMBERS, pos, {"H": h, "H0": h0, "S": s}, LAYOUT, {"n_occupied": 3},
                                         order="e3nn")
    return structure_to_sample(st, LAYOUT, *bases(LAYOUT), n_virtual=2), h, s


def test_assemble_reproduces_reference_and_energies_match_scipy():
    smp, h, s = sample(0)
    batch = collate([smp, sample(1)[0]])
    nb, eb = bases(LAYOUT)
    flat = assemble(batch.h_node, batch.h_edge, batch, nb, eb)
    assert float((flat - batch.h).abs().max()) < 1e-12
    eps = orbital_energies(flat, batch)
    assert torch.allclose(eps, batch.y, atol=1e-12)  # eigenvalue term vanishes at the truth
    assert np.allclose(eps[:5].numpy(), eigh(h, s, eigvals_only=True)[:5], atol=1e-10)
    # H0 base plus ΔH irreps: the NextHAM decomposition assembles to H as well
    flat2 = assemble(batch.h_node - batch.x_node, batch.h_edge - batch.x_edge, batch, nb, eb, base=batch.h0)
    assert float((flat2 - batch.h).abs().max()) < 1e-12


def test_loss_zero_at_truth_and_finite_gradients_with_degenerate_levels():
    batch = collate([sample(2, degenerate=True)[0]])
    nb, eb = bases(LAYOUT)
    node = batch.h_node.clone().requires_grad_(True)
    edge = batch.h_edge.clone().requires_grad_(True)
    eps = orbital_energies(assemble(node, edge, batch, nb, eb), batch)
    assert torch.allclose(eps[:3], torch.full((3,), -2.0, dtype=torch.float64), atol=1e-10)
    masks = (torch.ones_like(node, dtype=torch.bool), torch.ones_like(edge, dtype=torch.bool))
    out = hamiltonian_loss((node, edge), (batch.h_node, batch.h_edge), masks, eps, batch.y,
                           {"real": 1.0, "eig": 1.0, "eig_scale": 1e-3})
    assert float(out["loss"].detach()) < 1e-12
    # off the truth: the eigenvalue term is positive and its gradient finite despite the degeneracy
    out = hamiltonian_loss((node, edge), (batch.h_node, batch.h_edge), masks,
                           orbital_energies(assemble(node * 1.01, edge, batch, nb, eb), batch), batch.y,
                           {"real": 0.0, "eig": 1.0})
    out["loss"].backward()
    assert float(out["eig"]) > 0
    assert torch.isfinite(node.grad).all() and torch.isfinite(edge.grad).all() and node.grad.abs().sum() > 0


@pytest.mark.parametrize("mu", [0.0, 0.05, -0.1])
def test_gauge_shift_recovers_uniform_offset(mu):
    batch = collate([sample(3)[0]])
    shifted = batch.h + mu * batch.s
    assert torch.allclose(gauge_shift(shifted, batch.h, batch), torch.full_like(batch.h, mu), atol=1e-12)
    corrected = matrix_mae(shifted, batch.h + gauge_shift(shifted, batch.h, batch) * batch.s, batch)
    assert float(corrected.max()) < 1e-12


@pytest.mark.parametrize("power", [0.0, 1.0, 2.0])
def test_channel_weights_turn_the_normalised_mse_into_a_scaled_one(power):
    """With weights ``(σ/σ̄)^p`` the loss on normalised irreps equals the MSE of ``σ^(p/2)``-scaled errors.

    ``p = 2`` is the squared error in Hartree up to one constant; dead channels (σ = 0) carry no weight.
    """
    gen = torch.Generator().manual_seed(0)
    stds = (torch.rand(2, 5, generator=gen, dtype=torch.float64), torch.rand(3, 4, generator=gen, dtype=torch.float64))
    stds[1][0, 1] = 0.0
    types = (torch.tensor([0, 1, 1]), torch.tensor([2, 0, 1, 0]))
    pred = tuple(torch.randn(len(t), s.shape[1], generator=gen, dtype=torch.float64)
                 for t, s in zip(types, stds, strict=True))
    target = tuple(torch.randn_like(p) for p in pred)
    masks = tuple((s > 0)[t] for s, t in zip(stds, types, strict=True))
    cw = channel_weights(stds, power)
    alive = torch.cat([s[s > 0] for s in stds])
    mean_weight = torch.cat([w[s > 0] for w, s in zip(cw, stds, strict=True)]).mean()
    assert torch.allclose(mean_weight, torch.ones((), dtype=torch.float64))
    got = hamiltonian_loss(pred, target, masks, None, torch.zeros(1), {}, (cw[0][types[0]], cw[1][types[1]]))["real"]
    scale = (alive ** power).mean()
    sq = [((p - t) ** 2 * s[ty] ** power)[m] for p, t, s, ty, m in zip(pred, target, stds, types, masks, strict=True)]
    want = torch.cat(sq).mean() / scale
    assert torch.allclose(got, want, rtol=1e-12)
    assert cw[1][0, 1] == 0


def _lowdin_density(h, x, occ):
    _, u = np.linalg.eigh(x @ h @ x)
    return 2.0 * u[:, :occ] @ u[:, :occ].T


@pytest.mark.parametrize("degenerate", [False, True])
def test_density_error_is_the_first_order_density_change(degenerate):
    """‖δD‖² from the occupied–virtual block matches the exact change of the density to O(t) relative error."""
    smp, h, s = sample(3, degenerate)
    batch = collate([smp])
    x = batch.s_inv_half.reshape(len(h), len(h)).numpy()
    occ = int(batch.n_occ[0])
    rng = np.random.default_rng(4)
    e = rng.normal(size=h.shape)
    e = e + e.T
    ref = batch.h
    for t in (1e-4, 1e-5):
        pert = ref + t * torch.from_numpy(e.reshape(-1))
        exact = np.sum((_lowdin_density(pert.reshape(h.shape).numpy(), x, occ) - _lowdin_density(h, x, occ)) ** 2)
        first = float(density_error(pert, ref, batch)[0])
        assert first > 0 and abs(first / exact - 1) < 200 * t  # second-order term relative to the first: O(t)
    assert float(density_error(ref, ref, batch)[0]) == 0.0
    pert = (ref + 1e-3 * torch.from_numpy(e.reshape(-1))).requires_grad_(True)
    density_error(pert, ref, batch).sum().backward()
    assert torch.isfinite(pert.grad).all() and pert.grad.abs().max() > 0


def test_density_error_ignores_changes_inside_the_occupied_and_virtual_spaces():
    """An error that only mixes occupied with occupied (or virtual with virtual) orbitals leaves D unchanged: 0."""
    smp, h, _ = sample(5)
    batch = collate([smp])
    n, occ = len(h), int(batch.n_occ[0])
    x = batch.s_inv_half.reshape(n, n).numpy()
    _, u = np.linalg.eigh(x @ h @ x)
    rng = np.random.default_rng(6)
    a, b = rng.normal(size=(occ, occ)), rng.normal(size=(n - occ, n - occ))
    inner = np.zeros((n, n))
    inner[:occ, :occ], inner[occ:, occ:] = a + a.T, b + b.T
    xinv = np.linalg.inv(x)
    err = xinv @ u @ inner @ u.T @ xinv  # X err X = U inner Uᵀ
    pert = batch.h + torch.from_numpy(err.reshape(-1))
    assert float(density_error(pert, batch.h, batch)[0]) < 1e-20
    zero, keep = (torch.zeros(1),) * 2, (torch.ones(1, dtype=bool),) * 2
    loss = hamiltonian_loss(zero, zero, keep, None, torch.zeros(0), {"density": 0.5}, density=torch.tensor([2.0, 4.0]))
    assert float(loss["loss"]) == 1.5 and float(loss["density"]) == 3.0  # weight × mean over graphs
