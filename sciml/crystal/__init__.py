"""Crystal property prediction: public Python API.

>>> from sciml.crystal import predict
>>> df = predict(["examples/structures"], model="perov5-heat-all")  # doctest: +SKIP

The names below are imported on first use (PEP 562), so ``import sciml.crystal`` (and the ``sciml`` command's
start-up) does not pay for torch, Lightning and pymatgen until a model is actually needed.
"""

from __future__ import annotations

import sys
import types

from sciml.core.lazy import lazy_exports

#: public name -> module defining it
_EXPORTS = {"CrystalPredictor": "sciml.crystal.artifact", "load_model": "sciml.crystal.artifact",
            "iter_prediction_rows": "sciml.crystal.predict", "predict": "sciml.crystal.predict"}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


class _Package(types.ModuleType):
    """Keeps ``sciml.crystal.predict`` the function when the submodule of the same name gets imported."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and value.__name__ == f"{__name__}.{name}" and name in _EXPORTS:
            value = getattr(value, name)  # the import system binds the submodule; the public name wins
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
