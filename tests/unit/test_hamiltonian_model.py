"""Equivariance of the whole Hamiltonian model: H_pred(Qr + t) = D(Q) H_pred(r) D(Q)ᵀ, permutations, Hermiticity.

Float64 throughout (model built under ``torch.set_default_dtype(torch.float64)``); synthetic molecule with an
equivariant H0 (random symmetric H0 at r, ``D H0 Dᵀ`` at Qr), so no pyscf and no shared data are needed.
Tolerance 1e-9 relative: exact Wigner D (least squares, ~1e-14) and float64 e3nn (~1e-13).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from sciml.hamiltonian.data.datamodule import bases, collate, structure_to_sample
from sciml.hamiltonian.module import HamiltonianModule
from sciml.hamiltonian.nn import BlockBasis
from sciml.hamiltonian.orbitals import OrbitalLayout, block_wigner
from sciml.hamiltonian.structure import HamiltonianStructure
from sciml.hamiltonian.task import fit_ridge, normalisation_stats
from sciml.testing import random_orthogonal

LAYOUT = OrbitalLayout({8: (0, 0, 1, 2), 1: (0, 1)})
NUMBERS = np.array([8, 1, 1])
NET = {"hidden": "8x0e+4x1o+4x1e+2x2e+2x2o+2x3o+2x3e+2x4e", "lmax": 2, "n_layers": 2, "n_rbf": 8,
       "cutoff": 6.0, "radial_hidden": 16, "dtype": "float64"}
RIDGE = {"lmax": 2, "lam": 1e-6}


@pytest.fixture(autouse=True)
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def molecule(pos, h0, s, numbers=NUMBERS):
    """A synthetic molecule whose target ``H = H0 + 0.1 S + 0.02 H0²`` differs from H0 equivariantly (so the
    normalisation statistics of ``H − H0`` are alive and the network's read-outs count)."""
    h = h0 + 0.1 * s + 0.02 * h0 @ h0
    return HamiltonianStructure.from_dense(numbers, pos, {"H0": h0, "S": s, "H": h}, LAYOUT,
                                           meta={"n_occupied": 3}, order="e3nn")


def reference(rng):
    pos = np.array([[0.0, 0.0, 0.1], [0.0, 0.78, -0.45], [0.05, -0.74, -0.47]]) + rng.normal(scale=0.05, size=(3, 3))
    n = int(LAYOUT.atom_offsets(NUMBERS)[-1])
    a = rng.normal(size=(n, n))
    b = rng.normal(scale=0.1, size=(n, n))
    return pos, a + a.T, np.eye(n) + 0.5 * (b + b.T) / n


def build(samples, use_h0=True, ridge=False, input_clip=None, readout_cutoff=None):
    torch.manual_seed(0)
    node_basis, edge_basis = bases(LAYOUT)
    dm = SimpleNamespace(datasets={"train": samples}, node_basis=node_basis, edge_basis=edge_basis, collate_fn=collate)
    fitted = fit_ridge(dm, RIDGE) if ridge else None
    stats = normalisation_stats(dm, use_h0, fitted)
    module = HamiltonianModule(network=NET | {"use_h0": use_h0}, layout=LAYOUT.to_dict(), stats=stats,
                               ridge=RIDGE | {"shapes": fitted.shapes} if ridge else None, input_clip=input_clip,
                               readout_cutoff=readout_cutoff)
    if ridge:
        module.ridge.load_state_dict(fitted.state_dict())
        assert len(fitted.shapes) > 0
    # non-trivial weights everywhere (zero-initialised paths would hide errors)
    with torch.no_grad():
        for p in module.net.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return module.eval()


def predict(module, structures):
    node_basis, edge_basis = bases(LAYOUT)
    batch = collate([structure_to_sample(s, LAYOUT, node_basis, edge_basis) for s in structures])
    with torch.no_grad():
        h, _, _ = module(batch)
    n = int(batch.n_ao[0])
    return h.reshape(len(structures), n, n)


@pytest.mark.parametrize(("use_h0", "ridge", "clip", "readout"), [
    (True, False, None, None), (False, False, None, None), (True, True, None, None), (True, True, 0.3, None),
    (True, True, None, [0.8, 1.3])])
def test_rotation_translation_equivariance(use_h0, ridge, clip, readout):
    """``clip`` 0.3: the input bound is active on most irrep instances (their training RMS is 1 per component);
    ``readout`` [0.8, 1.3] Å: the envelope is partly on for the O–H pairs (~0.96 Å) and off for H–H (~1.5 Å)."""
    rng = np.random.default_rng(0)
    pos, h0, s = reference(rng)
    module = build([structure_to_sample(molecule(pos, h0, s), LAYOUT, *bases(LAYOUT))], use_h0, ridge, clip, readout)
    for k in range(3):
        q = -random_orthogonal(rng, parity=False) if k == 1 else random_orthogonal(rng, parity=False)  # k=1: improper
        d = block_wigner(LAYOUT, NUMBERS, q).numpy()
        t = rng.normal(size=3) * 2.0
        rotated = molecule(pos @ q.T + t, d @ h0 @ d.T, d @ s @ d.T)
        out = predict(module, [molecule(pos, h0, s), rotated])
        expect = torch.from_numpy(d) @ out[0] @ torch.from_numpy(d).T
        scale = float(out[0].abs().max())
        assert float((out[1] - expect).abs().max()) <= 1e-9 * scale, f"rotation {k} (parity {k == 1})"
        assert float((out[0] - out[0].T).abs().max()) <= 1e-12 * scale  # symmetric by construction


def test_permutation_equivariance():
    rng = np.random.default_rng(1)
    pos, h0, s = reference(rng)
    module = build([structure_to_sample(molecule(pos, h0, s), LAYOUT, *bases(LAYOUT))], ridge=True)
    perm = np.array([2, 0, 1])
    off = LAYOUT.atom_offsets(NUMBERS)
    ao = np.concatenate([np.arange(off[a], off[a + 1]) for a in perm])
    permuted = molecule(pos[perm], h0[np.ix_(ao, ao)], s[np.ix_(ao, ao)], NUMBERS[perm])
    a, b = predict(module, [molecule(pos, h0, s)])[0], predict(module, [permuted])[0]
    assert float((b - a[np.ix_(ao, ao)]).abs().max()) <= 1e-10 * float(a.abs().max())


def test_block_basis_round_trip_and_equivariance():
    rng = np.random.default_rng(2)
    basis = BlockBasis(LAYOUT.shells, [(8, 1), (1, 8), (8, 8)])
    block = torch.from_numpy(rng.normal(size=(10, 4)))
    x = basis.to_irreps(block, 8, 1)
    assert torch.allclose(basis.to_blocks(x, 8, 1), block, atol=1e-13)
    q = random_orthogonal(rng)
    d8, d1 = block_wigner(LAYOUT, [8], q), block_wigner(LAYOUT, [1], q)
    x_rot = basis.to_irreps(d8 @ block @ d1.T, 8, 1)
    assert torch.allclose(x_rot, x @ basis.irreps.D_from_matrix(torch.from_numpy(q)).T, atol=1e-6)  # e3nn's D ~1e-7


def test_input_clip_bounds_instance_norms_and_is_identity_inside():
    from sciml.hamiltonian.nn.normalize import clip_instances, irrep_instances

    inst = irrep_instances(bases(LAYOUT)[1].irreps)[0]
    dims = torch.bincount(inst).double()
    x = torch.randn(50, len(inst), generator=torch.Generator().manual_seed(0)) * 30.0
    out = clip_instances(x, inst, 2.0)
    norms = torch.zeros(50, len(dims)).index_add_(1, inst, out * out).sqrt()
    assert float((norms - 2.0 * dims.sqrt()).max()) <= 1e-12  # on or inside the sphere
    inside = x / 1e3  # far inside: unchanged
    torch.testing.assert_close(clip_instances(inside, inst, 2.0), inside, rtol=0, atol=0)
    big = torch.zeros(50, len(dims)).index_add_(1, inst, x * x).sqrt() > 2.0 * dims.sqrt()
    direction = (out / x)[:, :]  # a clipped instance keeps its direction: one positive factor per instance
    for k in range(len(dims)):
        f = direction[:, inst == k]
        assert torch.allclose(f, f[:, :1].expand_as(f)) and bool((f > 0).all())
        assert bool((f[big[:, k], 0] < 1).all())


def test_readout_cutoff_leaves_far_pairs_to_the_ridge():
    """Beyond ``r_off`` the network adds nothing to a pair's ΔH (here without ridge: exactly 0); inside it does."""
    rng = np.random.default_rng(2)
    pos, h0, s = reference(rng)
    sample = structure_to_sample(molecule(pos, h0, s), LAYOUT, *bases(LAYOUT))
    module = build([sample], readout_cutoff=[0.5, 1.2])
    batch = collate([sample])
    with torch.no_grad():
        out = module.outputs(batch)
    dist = batch.vectors().norm(dim=-1)
    far, near = dist > 1.2, (dist > 0) & (dist < 1.2)
    assert far.any() and near.any()
    assert torch.equal(out["d_edge"][far], out["base_edge"][far])
    assert float((out["d_edge"][near] - out["base_edge"][near]).abs().max()) > 1e-6


@pytest.mark.parametrize(("bad", "match"), [([1.0], "must be \\[r_on, r_off\\]"), ([3.0, 2.0], "onset < cutoff")])
def test_readout_cutoff_rejects_bad_settings(bad, match):
    rng = np.random.default_rng(3)
    pos, h0, s = reference(rng)
    with pytest.raises(ValueError, match=match):
        build([structure_to_sample(molecule(pos, h0, s), LAYOUT, *bases(LAYOUT))], readout_cutoff=bad)


def test_density_term_alone_trains_the_network():
    """With only the density weight on, the training loss is the mean first-order density error of the assembled
    matrices, and it sends a gradient to the network (the reference orbitals carry none)."""
    from sciml.hamiltonian.loss import density_error

    rng = np.random.default_rng(2)
    samples = [structure_to_sample(molecule(*reference(rng)), LAYOUT, *bases(LAYOUT)) for _ in range(2)]
    module = build(samples, ridge=True).train()
    module.loss_weights |= {"real": 0.0, "eig": 0.0, "density": 1.0}
    batch = collate(samples)
    loss = module.training_step(batch, 0)
    with torch.no_grad():
        expect = density_error(module.matrices(batch, module.outputs(batch)), batch.h, batch).mean()
    assert float(expect) > 0 and abs(float(loss.detach()) - float(expect)) <= 1e-12 * float(expect)
    loss.backward()
    grads = [p.grad for p in module.net.parameters() if p.grad is not None]
    assert grads and max(float(g.abs().max()) for g in grads) > 0


def test_split_linear_is_e3nns_linear():
    """The convolution's read-out through one split equals e3nn's Linear, values and input gradients (float64)."""
    from sciml.core.e3nn_o3 import o3
    from sciml.hamiltonian.nn.layers import EdgeConvolution, split_linear

    torch.manual_seed(0)
    conv = EdgeConvolution(NET["hidden"], o3.Irreps.spherical_harmonics(2), NET["hidden"], 10).double()
    x = torch.randn(5, conv.linear.irreps_in.dim, dtype=torch.float64, requires_grad=True)
    ours, theirs = split_linear(conv.linear, x), conv.linear(x)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    probe = torch.randn_like(theirs)
    grads = [torch.autograd.grad((y * probe).sum(), x)[0] for y in (ours, theirs)]
    torch.testing.assert_close(*grads, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="biases"):
        split_linear(o3.Linear("2x0e", "2x0e", biases=True), torch.zeros(1, 2))


@pytest.mark.parametrize("built", [torch.float64, torch.float32])
@pytest.mark.parametrize("irreps", [NET["hidden"], "32x0e+16x1o+16x1e+8x2e+8x2o+4x3o+4x3e+4x4e"])
def test_tensor_product_linear_is_e3nns_product_then_linear(irreps, built):
    """The fused convolution equals e3nn's TensorProduct then Linear: values and every gradient (float64).

    The second irreps is the organic model's, l up to 4 with spherical harmonics up to 3: every path kind it has.
    Built under a float32 default dtype, e3nn's constants are float32-rounded even once cast to float64 (as in a
    shipped float64 model); the fused product uses the same constants, so the match stays exact.
    """
    from sciml.core.e3nn_o3 import o3
    from sciml.hamiltonian.nn.layers import EdgeConvolution, tensor_product_linear

    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(built)
    try:
        conv = EdgeConvolution(irreps, o3.Irreps.spherical_harmonics(3), irreps, 10).double()
    finally:
        torch.set_default_dtype(previous)
    n = 7
    x1 = torch.randn(n, conv.tp.irreps_in1.dim, dtype=torch.float64, requires_grad=True)
    x2 = o3.spherical_harmonics(conv.tp.irreps_in2, torch.randn(n, 3, dtype=torch.float64), True).requires_grad_()
    w = torch.randn(n, conv.tp.weight_numel, dtype=torch.float64, requires_grad=True)
    ours, theirs = tensor_product_linear(conv.tp, conv.linear, x1, x2, w), conv.linear(conv.tp(x1, x2, w))
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    probe = torch.randn_like(theirs)
    inputs = (x1, x2, w, conv.linear.weight)
    grads = [torch.autograd.grad((y * probe).sum(), inputs) for y in (ours, theirs)]
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="uvu"):
        tensor_product_linear(o3.FullyConnectedTensorProduct("2x0e", "1x0e", "2x0e"), conv.linear, x1, x2, w)


def test_stored_ridge_output_is_used_only_by_the_ridge_that_made_it():
    """``attach_base``: batches of samples carrying the ridge's ΔH give the same outputs without calling the ridge;
    new ridge weights (loaded into the model, or into the ridge itself) make the stored values stale, and then the
    ridge runs again."""
    from sciml.hamiltonian.model import attach_base

    rng = np.random.default_rng(3)
    samples = [structure_to_sample(molecule(*reference(rng)), LAYOUT, *bases(LAYOUT)) for _ in range(3)]
    module = build(samples, ridge=True)
    plain = module.outputs(collate(samples[::-1]))  # the ridge run on a batch in another order than the attach's
    attach_base(samples, module, collate, chunk=2)  # chunks of 2 and 1: the split back per sample is exercised
    calls, ridge_forward = [], module.ridge.forward
    module.ridge.forward = lambda *a: calls.append(1) or ridge_forward(*a)
    batch = collate(samples[::-1])  # each sample keeps its own values
    assert batch.base_token == module.ridge.token
    stored = module.outputs(batch)
    assert not calls
    for key in ("base_edge", "d_node", "d_edge"):
        torch.testing.assert_close(stored[key], plain[key], rtol=0, atol=1e-12)
    module.load_state_dict(module.state_dict())  # the same weights, but loaded: stored values no longer trusted
    module.outputs(collate(samples))
    assert len(calls) == 1
    attach_base(samples, module, collate)
    module.outputs(collate(samples))
    before = len(calls)  # the attach's own ridge calls, none since
    module.ridge.load_state_dict(module.ridge.state_dict())
    module.outputs(collate(samples))
    assert len(calls) == before + 1
    mixed = collate([samples[0], structure_to_sample(molecule(*reference(rng)), LAYOUT, *bases(LAYOUT))])
    assert mixed.base_node is None and mixed.base_token is None  # not every sample carries it: none is used


def test_training_stores_the_ridge_output_in_train_and_val_samples():
    """A fit stores the ridge's ΔH once (``on_train_start``), under the ridge's token, in the train and val samples."""
    import lightning as L
    from torch.utils.data import DataLoader

    rng = np.random.default_rng(4)
    samples = [structure_to_sample(molecule(*reference(rng)), LAYOUT, *bases(LAYOUT)) for _ in range(4)]
    module = build(samples[:2], ridge=True)

    class Data(L.LightningDataModule):
        datasets, collate_fn = {"train": samples[:2], "val": samples[2:3], "test": samples[3:]}, staticmethod(collate)

        def train_dataloader(self):
            return DataLoader(self.datasets["train"], batch_size=2, collate_fn=collate)

    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu")
    trainer.fit(module, datamodule=Data())
    assert all(s["base_token"] == module.ridge.token for s in samples[:3])
    assert "base_token" not in samples[3]  # the test split is not used in training
