"""Crystal property prediction: public Python API.

>>> from sciml.crystal import predict
>>> df = predict(["examples/structures"], model="checkpoints/perov5-heat-all")  # doctest: +SKIP
"""

from __future__ import annotations

from sciml.crystal.artifact import CrystalPredictor, load_model
from sciml.crystal.predict import iter_prediction_rows, predict

__all__ = ["CrystalPredictor", "iter_prediction_rows", "load_model", "predict"]
