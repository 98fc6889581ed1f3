"""Single-cell perturbation response: load a model, generate perturbed cells, effects with conformal bands.

>>> from sciml.perturbation import load_model, predict_effects
>>> predictor = load_model("checkpoints/grn-default")  # doctest: +SKIP

The names below are imported on first use (PEP 562): ``import sciml.perturbation`` stays cheap until a model,
torch or anndata is actually needed.
"""

from __future__ import annotations

from sciml.core.lazy import lazy_exports

#: public name -> module defining it
_EXPORTS = {"DEFAULT_MODEL": "sciml.perturbation.artifact", "PerturbationPredictor": "sciml.perturbation.artifact",
            "load_model": "sciml.perturbation.artifact", "generate": "sciml.perturbation.predict",
            "parse_perturbations": "sciml.perturbation.predict", "predict_effects": "sciml.perturbation.predict",
            "PriorSettings": "sciml.perturbation.settings", "prior_mean": "sciml.perturbation.prior"}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
