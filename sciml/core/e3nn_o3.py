"""``e3nn.o3`` without importing ``torch._dynamo`` at start-up.

e3nn 0.5–0.6 decorates one function (``change_basis_real_to_complex``) with ``@torch.compiler.disable``, which
imports ``torch._dynamo`` when the decorator runs, i.e. at ``import e3nn.o3``: about a second of start-up for
every command that loads an equivariant model (``benchmarks/startup.py``), and nothing in sciml compiles. Here e3nn
is imported with that decorator deferred: the decorated function runs as is while ``torch._dynamo`` is not loaded
(nothing can then be tracing it) and through ``torch._dynamo.disable`` once it is,
so ``torch.compile`` still sees the graph break e3nn asks for.

Use ``from sciml.core.e3nn_o3 import o3`` where a module would write ``from e3nn import o3`` (and ``e3nn_nn`` for
``e3nn.nn``, which imports ``e3nn.o3`` itself). Only the first import in a process matters; when ``e3nn.o3`` is
already loaded this is a plain import.
"""

from __future__ import annotations

import functools
import sys
from contextlib import contextmanager

import torch

__all__ = ["deferred_disable", "e3nn_nn", "o3"]


def deferred_disable(fn=None, recursive: bool = True, **kwargs):
    """``torch.compiler.disable`` that imports ``torch._dynamo`` only when ``fn`` is called after it was loaded.

    Parameters
    ----------
    fn : callable, optional
        The function to keep out of compilation (None: return a decorator, as torch's does).
    recursive, **kwargs
        Passed to ``torch._dynamo.disable``.

    """
    if fn is None:
        return functools.partial(deferred_disable, recursive=recursive, **kwargs)
    disabled = None

    @functools.wraps(fn)
    def wrapper(*args, **kw):
        nonlocal disabled
        if "torch._dynamo" not in sys.modules:  # no dynamo loaded: nothing is compiling this call
            return fn(*args, **kw)
        if disabled is None:
            disabled = sys.modules["torch._dynamo"].disable(fn, recursive, **kwargs)
        return disabled(*args, **kw)

    return wrapper


@contextmanager
def _compiler_disable_deferred():
    """Within the block, ``torch.compiler.disable`` is :func:`deferred_disable` (restored on exit)."""
    original = torch.compiler.disable
    torch.compiler.disable = deferred_disable
    try:
        yield
    finally:
        torch.compiler.disable = original


if "e3nn.o3" in sys.modules:
    from e3nn import nn as e3nn_nn
    from e3nn import o3
else:
    with _compiler_disable_deferred():
        from e3nn import nn as e3nn_nn
        from e3nn import o3
