"""Crystal property prediction: public Python API.

>>> from sciml.crystal import predict
>>> df = predict(["examples/structures"], model="mp-formation-energy")  # doctest: +SKIP

The names below are imported on first use (PEP 562), so ``import sciml.crystal`` (and the ``sciml`` command's
start-up) does not pay for torch, Lightning and pymatgen until a model is actually needed.
"""

from __future__ import annotations

from sciml.core.lazy import keep_public_names, lazy_exports

#: public name -> module it is read from (``sciml.crystal.predict`` imports torch_geometric through
#: :mod:`sciml.core.pyg`, without ``torch._dynamo``, before it imports the artifact reader)
_EXPORTS = {"CrystalPredictor": "sciml.crystal.predict", "load_model": "sciml.crystal.predict",
            "iter_prediction_rows": "sciml.crystal.predict", "predict": "sciml.crystal.predict"}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
keep_public_names(__name__)
