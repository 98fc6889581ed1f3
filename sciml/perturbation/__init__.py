"""Single-cell perturbation response: load a model, generate perturbed cells, effects with conformal bands.

>>> from sciml.perturbation import load_model, predict_effects
>>> predictor = load_model("checkpoints/grn-default")  # doctest: +SKIP
"""

from __future__ import annotations

from sciml.perturbation.artifact import DEFAULT_MODEL, PerturbationPredictor, load_model
from sciml.perturbation.predict import generate, parse_perturbations, predict_effects

__all__ = ["DEFAULT_MODEL", "PerturbationPredictor", "generate", "load_model", "parse_perturbations",
           "predict_effects"]
