"""The graph-attention block's gathered atom projections compute the equations of its docstring exactly."""

import pytest
import torch

from sciml.crystal.nn.graph_attention import GraphAttentionBlock


def block_and_graph(ffn: bool, edge_update: bool, seed: int = 0):
    torch.manual_seed(seed)
    block = GraphAttentionBlock(8, 6, ffn=ffn, edge_update=edge_update).double()
    h = torch.randn(11, 8, dtype=torch.float64, requires_grad=True)
    e = torch.randn(40, 6, dtype=torch.float64, requires_grad=True)
    edge_index = torch.randint(0, 11, (2, 40))
    return block, h, edge_index, e


@pytest.mark.parametrize("ffn, edge_update", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("train", [True, False])
def test_gathered_forward_equals_explicit(ffn, edge_update, train):
    block, h, edge_index, e = block_and_graph(ffn, edge_update)
    block.train(train)
    outputs, grads = [], []
    for forward in (block.forward, block.forward_explicit):
        block.zero_grad()
        h.grad = e.grad = None
        new_h, new_e = forward(h, edge_index, e)
        loss = (new_h.sin().sum() + new_e.cos().sum()) if edge_update else new_h.sin().sum()
        loss.backward()
        outputs.append((new_h.detach(), new_e.detach()))
        grads.append([h.grad.clone()] + ([e.grad.clone()] if edge_update else [])
                     + [p.grad.clone() for p in block.parameters() if p.grad is not None])
    for a, b in zip(outputs[0], outputs[1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert len(grads[0]) == len(grads[1])
    for a, b in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_every_parameter_gets_a_gradient():
    """No parameter is left out of the gathered path (DDP needs every one used)."""
    block, h, edge_index, e = block_and_graph(True, True)
    new_h, new_e = block(h, edge_index, e)
    (new_h.sum() + new_e.sum()).backward()
    assert all(p.grad is not None for p in block.parameters())
