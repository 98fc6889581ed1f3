"""Shared data layer: structure reading and checks, input expansion, periodic neighbour lists.

Public names are re-exported lazily (PEP 562), so ``import sciml.data`` stays cheap and imports
pymatgen/torch only when one of them is used.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "StructureError": "structures",
    "read_structure": "structures",
    "check_structure": "structures",
    "parse_cif_string": "structures",
    "iter_structures": "sources",
    "read_labelled": "sources",
    "neighbor_list": "neighbors",
    "edge_vectors": "neighbors",
    "reciprocal_hkl": "neighbors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
