"""sciml.core.e3nn_o3: e3nn imported without torch._dynamo, the compile graph break kept once dynamo is loaded."""

from __future__ import annotations

import importlib
import sys

import torch

from sciml.core.e3nn_o3 import deferred_disable, o3


def test_deferred_disable_runs_the_function_and_keeps_its_name():
    calls = []

    @deferred_disable
    def twice(x):
        calls.append(x)
        return 2 * x

    assert twice(3) == 6 and calls == [3] and twice.__name__ == "twice"
    assert deferred_disable(recursive=False)(abs)(-2) == 2


def test_e3nn_change_of_basis_is_unitary_and_compiles_after_dynamo_loads():
    q = o3.change_basis_real_to_complex(2, dtype=torch.float64)
    assert torch.allclose(q @ q.conj().T, torch.eye(5, dtype=q.dtype), atol=1e-12)
    importlib.import_module("torch._dynamo")  # from here on the wrapper goes through torch._dynamo.disable

    assert "torch._dynamo" in sys.modules

    def f(x):
        return (o3.change_basis_real_to_complex(1, dtype=torch.float64).abs() * x).sum()

    x = torch.ones(3, 3, dtype=torch.float64)
    assert torch.allclose(torch.compile(f, backend="eager")(x), f(x), atol=1e-14)
