"""Graph-masked attention over the allowed pairs only (``EdgeMask``) and in batch blocks gives the dense result."""

from __future__ import annotations

import pytest
import torch

from sciml.perturbation.nn import attention
from sciml.perturbation.nn.attention import DifferentialAttention
from sciml.perturbation.nn.graph import SPARSE_SHARE, EdgeMask, compact_mask


def _graph_mask(n_q: int, n_k: int, share: float, seed: int = 0) -> torch.Tensor:
    """A random bool mask with about ``share`` of the pairs allowed and at least one key per query."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(n_q, n_k, generator=g) < share
    mask[torch.arange(n_q), torch.randint(0, n_k, (n_q,), generator=g)] = True
    return mask


def test_edge_mask_round_trip_and_order():
    mask = _graph_mask(9, 13, 0.2)
    edges = EdgeMask.from_dense(mask)
    assert torch.equal(edges.to_dense(), mask)
    assert torch.equal(edges.counts, mask.sum(-1)) and bool((edges.query.diff() >= 0).all())


def test_edge_mask_refuses_a_query_without_keys():
    mask = _graph_mask(4, 6, 0.3)
    mask[2] = False
    with pytest.raises(ValueError, match="at least one key"):
        EdgeMask.from_dense(mask)


def test_compact_mask_goes_sparse_only_below_the_share():
    sparse, dense = _graph_mask(50, 50, 0.05), _graph_mask(50, 50, 0.9)
    assert sparse.float().mean() <= SPARSE_SHARE < dense.float().mean()
    assert isinstance(compact_mask(sparse), EdgeMask)
    assert compact_mask(dense) is dense and compact_mask(None) is None


@pytest.mark.parametrize("cross", [False, True])
def test_edge_mask_gives_the_dense_masked_output_and_gradient(cross):
    torch.manual_seed(0)
    att = DifferentialAttention(16, heads=2, depth=1).double()
    x = torch.randn(5, 20, 16, dtype=torch.float64, requires_grad=True)
    ctx = torch.randn(5, 30, 16, dtype=torch.float64) if cross else None
    mask = _graph_mask(20, 30 if cross else 20, 0.1)
    dense, sparse = att(x, ctx, mask), att(x, ctx, EdgeMask.from_dense(mask))
    torch.testing.assert_close(sparse, dense, rtol=1e-12, atol=1e-12)
    (g_dense,) = torch.autograd.grad(dense.square().sum(), x)
    (g_sparse,) = torch.autograd.grad(sparse.square().sum(), x)
    torch.testing.assert_close(g_sparse, g_dense, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(att.attention_map(x, ctx, EdgeMask.from_dense(mask)), att.attention_map(x, ctx, mask),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sparse", [False, True])
def test_batch_blocks_do_not_change_the_result(monkeypatch, sparse):
    torch.manual_seed(1)
    att = DifferentialAttention(16, heads=2).double()
    x, ctx = torch.randn(7, 12, 16, dtype=torch.float64), torch.randn(7, 12, 16, dtype=torch.float64)
    mask = _graph_mask(12, 12, 0.15)
    mask = EdgeMask.from_dense(mask) if sparse else mask
    whole = att(x, ctx, mask)
    monkeypatch.setattr(attention, "BLOCK_SCORES", 2 * 2 * 12 * 12 * 3)  # blocks of 3 rows: 3 + 3 + 1
    torch.testing.assert_close(att(x, ctx, mask), whole, rtol=1e-13, atol=1e-13)
