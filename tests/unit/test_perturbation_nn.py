"""Pure nn pieces of the perturbation flow model: attention, backbone, paths, MMD, ODE integrators."""

from __future__ import annotations

import math

import pytest
import torch

from sciml.perturbation.nn import (
    ControlPath,
    DifferentialAttention,
    NoisePath,
    PADTransformer,
    integrate,
    lambda_init,
    mmd2,
    ot_pairing,
)
from sciml.perturbation.nn.graph import adjacency_from_edges, propagate


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_lambda_init_schedule():
    assert lambda_init(0) == pytest.approx(0.2)
    assert lambda_init(100) == pytest.approx(0.8, abs=1e-12)


def test_differential_attention_is_difference_of_softmaxes():
    att = DifferentialAttention(16, heads=2, depth=1).double()
    x = torch.randn(3, 5, 16, dtype=torch.float64)
    hd = 8  # head dim; q/k halves of 4
    q = att.q(x).view(3, 5, 2, 2, 4)
    k = att.k(x).view(3, 5, 2, 2, 4)
    lam = float(att.lam().detach())
    assert lam == pytest.approx(math.exp(float((att.lambda_q1 @ att.lambda_k1).detach()))
                                - math.exp(float((att.lambda_q2 @ att.lambda_k2).detach())) + lambda_init(1))
    a = att.attention_map(x)
    for h in range(2):
        s1 = torch.softmax(q[:, :, h, 0] @ k[:, :, h, 0].transpose(1, 2) / 2.0, -1)
        s2 = torch.softmax(q[:, :, h, 1] @ k[:, :, h, 1].transpose(1, 2) / 2.0, -1)
        torch.testing.assert_close(a[:, h], s1 - lam * s2, rtol=1e-12, atol=1e-12)
    # rows of A sum to 1 - λ
    torch.testing.assert_close(a.sum(-1), torch.full_like(a.sum(-1), 1 - lam))
    # full output: per-head RMSNorm of A V, scaled by (1 - λ_init), then out-projection
    v = att.v(x).view(3, 5, 2, hd).transpose(1, 2)
    heads = torch.nn.functional.rms_norm(a @ v, (hd,)) * (1 - lambda_init(1))
    torch.testing.assert_close(att(x), att.out(heads.transpose(1, 2).flatten(2)))


def test_differential_attention_mask_respected():
    att = DifferentialAttention(16, heads=2)
    x = torch.randn(2, 4, 16)
    mask = torch.eye(4, dtype=torch.bool)
    mask[0, 1] = True
    a = att.attention_map(x, mask=mask)
    assert (a[..., ~mask] == 0).all()
    y = att(x, mask=mask)
    x2 = x.clone()
    x2[:, 3] += 5.0  # token 3 is masked for query 0: its output must not move
    torch.testing.assert_close(att(x2, mask=mask)[:, 0], y[:, 0])


def test_dim_must_split_into_heads():
    with pytest.raises(ValueError, match="divisible"):
        DifferentialAttention(10, heads=4)


def _inputs(b=6, g=12, p=2, v=20):
    genes = torch.randperm(v)[:g]
    pert = torch.randint(0, v, (b, p))
    pert[0] = -1
    return torch.randn(b, g), torch.rand(b), torch.randn(b, g), torch.randn(b, g), pert, genes


def _net(v=20, **kw):
    net = PADTransformer(v, dim=16, depth=2, heads=2, **kw)
    net.set_graph(torch.randint(0, v, (2, 40)))
    for p in net.parameters():  # leave the zero initialisation so outputs are non-trivial
        if p.dim() > 1 and (p == 0).all():
            torch.nn.init.normal_(p, std=0.1)
    return net


def test_backbone_shapes_and_cell_permutation_equivariance():
    net = _net()
    x, t, ctrl, mean, pert, genes = _inputs()
    v = net(x, t, ctrl, mean, pert, genes)
    assert v.shape == x.shape
    perm = torch.randperm(6)
    torch.testing.assert_close(net(x[perm], t[perm], ctrl[perm], mean[perm], pert[perm], genes), v[perm])


def test_backbone_zero_init_gives_zero_velocity():
    net = PADTransformer(20, dim=16, depth=1, heads=2)
    x, t, ctrl, mean, pert, genes = _inputs()
    assert (net(x, t, ctrl, mean, pert, genes) == 0).all()


def test_adaln_time_conditioning_changes_output():
    net = _net()
    x, t, ctrl, mean, pert, genes = _inputs()
    v1 = net(x, torch.zeros(6), ctrl, mean, pert, genes)
    v2 = net(x, torch.ones(6), ctrl, mean, pert, genes)
    assert (v1 - v2).abs().max() > 1e-4
    # with the adaLN projections zeroed the blocks are identities: time then acts through the head only
    for block in net.blocks:
        torch.nn.init.zeros_(block.ada[1].weight)
        torch.nn.init.zeros_(block.ada[1].bias)
    torch.nn.init.zeros_(net.final_ada[1].weight)
    torch.nn.init.zeros_(net.final_ada[1].bias)
    torch.testing.assert_close(net(x, torch.zeros(6), ctrl, mean, pert, genes),
                               net(x, torch.ones(6), ctrl, mean, pert, genes))


def test_graph_mask_blocks_non_neighbours():
    v = 6
    net = PADTransformer(v, dim=16, depth=1, heads=2)
    net.set_graph(torch.tensor([[0, 2], [1, 3]]))  # edges 0-1, 2-3; 4, 5 isolated
    for p in net.parameters():
        if p.dim() > 1 and (p == 0).all():
            torch.nn.init.normal_(p, std=0.1)
    x, ctrl, mean = torch.randn(2, v), torch.randn(2, v), torch.randn(2, v)
    pert, t = torch.full((2, 2), -1), torch.rand(2)
    out = net(x, t, ctrl, mean, pert)
    x2 = x.clone()
    x2[:, 4] += 3.0
    out2 = net(x2, t, ctrl, mean, pert)
    torch.testing.assert_close(out2[:, :4], out[:, :4])  # one block: gene 4 reaches no other token
    assert (out2[:, 4] - out[:, 4]).abs().max() > 0


def test_unseen_gene_gets_graph_embedding():
    net = _net()
    vectors = net.pert.gene_vectors(net.gene.weight, net.adjacency)
    with torch.no_grad():
        net.gene.weight[3] += 1.0  # a neighbour's token embedding moves the propagated embedding of 3's neighbours
    moved = net.pert.gene_vectors(net.gene.weight, net.adjacency)
    neighbours = net.adjacency[3].nonzero().flatten()
    assert (moved[neighbours] - vectors[neighbours]).abs().sum(-1).min() > 0


def test_adjacency_and_propagation():
    adj = adjacency_from_edges(torch.tensor([[0], [2]]), 3)
    assert adj.tolist() == [[True, False, True], [False, True, False], [True, False, True]]
    x = torch.tensor([[1.0], [5.0], [3.0]])
    torch.testing.assert_close(propagate(x, adj, 1), torch.tensor([[2.0], [5.0], [2.0]]))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        adjacency_from_edges(torch.tensor([[0], [3]]), 3)


def test_paths_interpolate_and_endpoint():
    x0, x1, t = torch.randn(2, 3, 4), torch.randn(2, 3, 4), torch.rand(2, 3)
    xt, u = NoisePath.interpolate(x0, x1, t)
    torch.testing.assert_close(xt, x0 + t[..., None] * (x1 - x0))
    torch.testing.assert_close(NoisePath.endpoint(xt, t, u), x1)  # exact velocity → exact endpoint
    assert NoisePath(sigma=2.0).source(x1, x0).std() > 1.2


def test_ot_pairing_recovers_permutation():
    x1 = torch.randn(2, 8, 5) * 10
    perm = torch.stack([torch.randperm(8) for _ in range(2)])
    x0 = torch.stack([x1[c][perm[c].argsort()] for c in range(2)]) + 0.01 * torch.randn(2, 8, 5)
    pi = ot_pairing(x0, x1)
    paired = torch.gather(x0, 1, pi[..., None].expand_as(x0))
    assert (paired - x1).abs().max() < 0.1
    src = ControlPath(sigma=0.0).source(x1, x0)
    torch.testing.assert_close(src, paired)


def test_mmd_nonnegative_and_zero_for_identical():
    x = torch.randn(4, 30, 6, dtype=torch.float64)
    assert (mmd2(x, x, unbiased=False).abs() < 1e-12).all()
    y = torch.randn(4, 30, 6, dtype=torch.float64)
    assert (mmd2(x, y, unbiased=False) >= 0).all()
    same = mmd2(torch.randn(200, 3), torch.randn(200, 3))
    shifted = mmd2(torch.randn(200, 3), torch.randn(200, 3) + 1.0)
    assert abs(float(same)) < 0.02 < float(shifted)


@pytest.mark.parametrize(("method", "order"), [("euler", 1), ("rk4", 4)])
def test_integrators_order_of_accuracy(method, order):
    a = torch.tensor([[-0.5, 1.0], [-1.0, -0.5]], dtype=torch.float64)
    x0 = torch.tensor([[1.0, 0.5]], dtype=torch.float64)
    exact = x0 @ torch.linalg.matrix_exp(a).T
    errs = [float((integrate(lambda x, t: x @ a.T, x0, n, method) - exact).norm()) for n in (20, 40)]
    assert math.log2(errs[0] / errs[1]) == pytest.approx(order, abs=0.15)


def test_integrate_rejects_bad_settings():
    with pytest.raises(ValueError, match="unknown ODE method"):
        integrate(lambda x, t: x, torch.zeros(1), 2, "midpoint")
    with pytest.raises(ValueError, match="steps"):
        integrate(lambda x, t: x, torch.zeros(1), 0)
