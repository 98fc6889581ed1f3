"""``torch_geometric`` without importing ``torch._dynamo`` at start-up.

torch_geometric 2.x imports ``torch._dynamo`` in its module ``torch_geometric.isinstance``, for one function,
``is_torch_instance``, that unwraps modules compiled with ``torch.compile``: about 0.7 s of every command that builds
or batches a crystal graph (``benchmarks/crystal_speed.py``, ``one_file_command``), and nothing in sciml compiles.
Here that module is provided before torch_geometric is imported, holding the same function, which reads
``torch._dynamo`` only once it is loaded (a compiled module cannot exist before), so ``torch.compile`` users of
torch_geometric see no difference and ``torch._dynamo`` loads on first use as usual.

The stand-in is used only when the installed ``torch_geometric/isinstance.py`` defines exactly the names it replaces
(checked on its source, without importing it); otherwise torch_geometric is imported as is. Import this module (or
``Batch``, ``Data`` from it) before the first ``torch_geometric`` import of a process, as the crystal predict path
does; when torch_geometric is already loaded it is a plain import, like :mod:`sciml.core.e3nn_o3`.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

__all__ = ["Batch", "Data", "is_torch_instance"]

_REPLACED = "torch_geometric.isinstance"


def is_torch_instance(obj: Any, cls: type | tuple[type, ...]) -> bool:
    """``isinstance(obj, cls)``, looking through a ``torch.compile`` wrapper (``torch._dynamo.OptimizedModule``).

    The same function as torch_geometric's, except that ``torch._dynamo`` is read only when already imported.
    """
    dynamo = sys.modules.get("torch._dynamo")
    optimized = getattr(dynamo, "OptimizedModule", None)
    if optimized is not None and isinstance(obj, optimized):
        return isinstance(obj._orig_mod, cls)
    return isinstance(obj, cls)


def _defines_only_is_torch_instance() -> bool:
    """Whether the installed ``torch_geometric/isinstance.py`` defines ``is_torch_instance`` and nothing else."""
    spec = importlib.util.find_spec("torch_geometric")  # a top-level package: found, not imported
    if spec is None or not spec.submodule_search_locations:
        return False
    source = Path(next(iter(spec.submodule_search_locations))) / "isinstance.py"
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return False
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)}
    assigned = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                if isinstance(t, ast.Name)}
    return defined == {"is_torch_instance"} and not assigned


def _stand_in() -> types.ModuleType:
    module = types.ModuleType(_REPLACED, "Stand-in from sciml.core.pyg: is_torch_instance without torch._dynamo.")
    module.__spec__ = importlib.machinery.ModuleSpec(_REPLACED, None, origin=__file__)
    module.is_torch_instance = is_torch_instance
    return module


if "torch_geometric" not in sys.modules and _REPLACED not in sys.modules and _defines_only_is_torch_instance():
    sys.modules[_REPLACED] = _stand_in()
    try:
        import torch_geometric
    except BaseException:
        sys.modules.pop(_REPLACED, None)
        raise
    torch_geometric.isinstance = sys.modules[_REPLACED]  # the submodule attribute an import would have set

from torch_geometric.data import Batch, Data  # noqa: E402 (after the stand-in)
