from __future__ import annotations

import torch

from sciml.core.pyg import _defines_only_is_torch_instance, is_torch_instance


def test_installed_torch_geometric_gets_the_stand_in():
    assert _defines_only_is_torch_instance()  # else start-up silently pays for torch._dynamo again


def test_is_torch_instance_looks_through_torch_compile():
    linear = torch.nn.Linear(2, 2)
    assert is_torch_instance(linear, torch.nn.Linear) and not is_torch_instance(linear, torch.nn.Conv1d)
    compiled = torch.compile(linear)  # wraps only; nothing is compiled before a call
    assert not isinstance(compiled, torch.nn.Linear)
    assert is_torch_instance(compiled, torch.nn.Linear)
    assert is_torch_instance(compiled, (torch.nn.Conv1d, torch.nn.Linear))
