"""Pure nn pieces of the perturbation flow model: attention, backbone, paths, OT pairing, MMD, ODE integrators."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sciml.perturbation.distances import mmd2, mmd_rbf, ot_pairing
from sciml.perturbation.nn import (
    ControlPath,
    DifferentialAttention,
    NoisePath,
    PADTransformer,
    integrate,
    lambda_init,
)
from sciml.perturbation.nn.graph import adjacency_from_edges, propagate


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_lambda_init_schedule():
    assert lambda_init(0) == pytest.approx(0.2)
    assert lambda_init(100) == pytest.approx(0.8, abs=1e-12)


def _plain(att: DifferentialAttention) -> DifferentialAttention:
    """``att`` with λ = 0: zero λ vectors give λ = λ_init, and λ_init = 0 (so no output scaling either)."""
    with torch.no_grad():
        for p in (att.lambda_q1, att.lambda_k1, att.lambda_q2, att.lambda_k2):
            p.zero_()
    att.lambda_init = 0.0
    return att


def _sdpa_reference(att, x, context, mask=None):
    """Standard multi-head softmax attention on the first query/key half of each head (torch's SDPA)."""
    (b, lq, dim), lk, h = x.shape, context.shape[1], att.heads
    hd = dim // h
    q = att.q(x).view(b, lq, h, 2, hd // 2)[:, :, :, 0].transpose(1, 2)
    k = att.k(context).view(b, lk, h, 2, hd // 2)[:, :, :, 0].transpose(1, 2)
    v = att.v(context).view(b, lk, h, hd).transpose(1, 2)
    eye = torch.eye(lk, dtype=x.dtype).expand(b, h, lk, lk)
    amap = F.scaled_dot_product_attention(q, k, eye, attn_mask=mask)
    out = F.rms_norm(F.scaled_dot_product_attention(q, k, v, attn_mask=mask), (hd,))
    return amap, att.out(out.transpose(1, 2).flatten(2))


@pytest.mark.parametrize("masked", [False, True])
def test_differential_attention_with_zero_lambda_is_softmax_attention(masked):
    att = _plain(DifferentialAttention(16, heads=2, depth=3).double())
    x, ctx = torch.randn(3, 5, 16, dtype=torch.float64), torch.randn(3, 7, 16, dtype=torch.float64)
    mask = (torch.rand(5, 7) < 0.6) | torch.eye(5, 7, dtype=torch.bool) if masked else None
    assert float(att.lam().detach()) == 0.0
    amap, out = _sdpa_reference(att, x, ctx, mask)
    torch.testing.assert_close(att.attention_map(x, ctx, mask), amap, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(att(x, ctx, mask), out, rtol=1e-10, atol=1e-12)


def test_differential_attention_rows_sum_to_one_minus_lambda_init():
    """With zero λ vectors λ = λ_init(depth) exactly, and every row of A sums to 1 − λ (each softmax sums to 1)."""
    for depth in (0, 2, 7):
        att = DifferentialAttention(16, heads=4, depth=depth).double()
        with torch.no_grad():
            for p in (att.lambda_q1, att.lambda_k1, att.lambda_q2, att.lambda_k2):
                p.zero_()
        a = att.attention_map(torch.randn(2, 6, 16, dtype=torch.float64))
        torch.testing.assert_close(a.sum(-1), torch.full((2, 4, 6), 0.6 * math.exp(-0.3 * depth) + 0.2,
                                                         dtype=torch.float64))


def test_differential_attention_is_permutation_equivariant():
    att = DifferentialAttention(16, heads=2, depth=1).double()
    x, ctx = torch.randn(2, 6, 16, dtype=torch.float64), torch.randn(2, 9, 16, dtype=torch.float64)
    p, r = torch.randperm(6), torch.randperm(9)
    torch.testing.assert_close(att(x[:, p]), att(x)[:, p])  # self-attention: tokens in, tokens out
    torch.testing.assert_close(att(x[:, p], ctx[:, r]), att(x, ctx)[:, p])  # the context order does not matter
    assert (att(x) - att(x, ctx)).abs().max() > 1e-3  # ... but the context does


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
    assert abs(float(same)) < 0.005 < float(shifted)


def _mmd_by_loops(x, y, scales=(0.5, 1.0, 2.0, 4.0)):
    """The documented rule written out: median over distinct pairs of x ∪ y, kernel mean over scales, U-statistic."""
    z = np.concatenate([x, y])
    med = np.median([((z[i] - z[j]) ** 2).sum() for i in range(len(z)) for j in range(i + 1, len(z))])

    def k(a, b):
        return np.mean([np.exp(-((a - b) ** 2).sum() / (s * med)) for s in scales])

    n, m = len(x), len(y)
    kxx = sum(k(x[i], x[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    kyy = sum(k(y[i], y[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    return kxx + kyy - 2 * sum(k(a, b) for a in x for b in y) / (n * m)


@pytest.mark.parametrize(("n", "m"), [(5, 7), (6, 6), (4, 9)])  # odd and even numbers of pairs
def test_mmd_loss_and_metric_are_the_documented_rule(n, m):
    rng = np.random.default_rng(n * m)
    x, y = rng.normal(size=(n, 3)), rng.normal(0.5, 1.5, size=(m, 3))
    expected = _mmd_by_loops(x, y)
    assert mmd_rbf(x, y) == pytest.approx(expected, rel=1e-10, abs=1e-14)  # the metric
    loss = mmd2(torch.tensor(x)[None].expand(2, n, 3), torch.tensor(y)[None].expand(2, m, 3))  # the loss, batched
    torch.testing.assert_close(loss, torch.full((2,), expected, dtype=torch.float64), rtol=1e-10, atol=1e-14)


def test_mmd_bandwidth_is_detached_and_degenerate_samples_are_finite():
    x = torch.randn(6, 2, dtype=torch.float64, requires_grad=True)
    y = torch.randn(5, 2, dtype=torch.float64)
    mmd2(x, y).backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().max() > 0
    same = torch.zeros(4, 2)  # all pairs coincide: median 0 → bandwidth 1, MMD 0
    assert float(mmd2(same, same)) == 0.0


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


def test_gene_vectors_kept_for_prediction_follow_weight_changes():
    net = _net()
    with torch.no_grad():
        kept = net.pert.gene_vectors(net.gene.weight, net.adjacency)
        assert net.pert.gene_vectors(net.gene.weight, net.adjacency) is kept
        net.gene.weight[3] += 1.0  # an in-place change (an optimiser step, load_state_dict) is seen
        torch.testing.assert_close(net.pert.gene_vectors(net.gene.weight, net.adjacency),
                                   net.pert._gene_vectors(net.gene.weight, net.adjacency), rtol=0, atol=0)
        net.pert.graph_proj.weight.mul_(2.0)
        torch.testing.assert_close(net.pert.gene_vectors(net.gene.weight, net.adjacency),
                                   net.pert._gene_vectors(net.gene.weight, net.adjacency), rtol=0, atol=0)
    assert net.pert.gene_vectors(net.gene.weight, net.adjacency).requires_grad  # training: computed afresh
