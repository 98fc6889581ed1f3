"""The overlap filter of predicted corrections: a projection, equivariant, and a bound on error amplification."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from sciml.hamiltonian.loss import overlap_filter


def _batch(mats):
    sizes = [m.shape[0] for m in mats]
    ptr = torch.tensor([0] + [n * n for n in sizes]).cumsum(0)
    return SimpleNamespace(n_ao=torch.tensor(sizes), mat_ptr=ptr, s=torch.cat([m.reshape(-1) for m in mats]))


def _overlap(n, small, gen):
    """SPD matrix with two near-null directions (eigenvalues ``small``), like diffuse functions on close atoms."""
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    w = torch.cat([torch.tensor(small, dtype=torch.float64), torch.rand(n - len(small), generator=gen,
                                                                       dtype=torch.float64) + 0.5])
    return q @ torch.diag(w) @ q.T


def _sym(n, gen):
    a = torch.randn(n, n, generator=gen, dtype=torch.float64)
    return (a + a.T) / 2


def test_filter_is_an_equivariant_projection_that_bounds_amplification():
    gen = torch.Generator().manual_seed(0)
    s1, s2 = _overlap(6, [1e-4, 3e-3], gen), _overlap(4, [2e-3], gen)
    d1, d2 = _sym(6, gen) * 1e-3, _sym(4, gen) * 1e-3
    batch = _batch([s1, s2])
    flat = torch.cat([d1.reshape(-1), d2.reshape(-1)])
    out = overlap_filter(flat, batch, 0.1)
    torch.testing.assert_close(overlap_filter(out, batch, 0.1), out)  # a projection
    f1 = out[:36].reshape(6, 6)
    torch.testing.assert_close(f1, f1.T)
    w, u = torch.linalg.eigh(s1)
    assert (u[:, w < 0.1].T @ f1).abs().max() < 1e-14  # nothing left on near-null directions
    inv_half = u @ torch.diag(w ** -0.5) @ u.T
    amp_raw = torch.linalg.matrix_norm(inv_half @ d1 @ inv_half, 2)
    amp_filtered = torch.linalg.matrix_norm(inv_half @ f1 @ inv_half, 2)
    assert amp_filtered <= torch.linalg.matrix_norm(d1, 2) / 0.1 + 1e-15 < amp_raw  # |δε| ≤ ‖δ‖/τ, not ‖δ‖/s_min
    q, _ = torch.linalg.qr(torch.randn(6, 6, generator=gen, dtype=torch.float64))  # any orthogonal map (Wigner D)
    rotated = overlap_filter((q @ d1 @ q.T).reshape(-1), _batch([q @ s1 @ q.T]), 0.1).reshape(6, 6)
    torch.testing.assert_close(rotated, q @ f1 @ q.T, atol=1e-14, rtol=0)
    torch.testing.assert_close(overlap_filter(flat, batch, 1e-6), flat)  # below every eigenvalue: identity
