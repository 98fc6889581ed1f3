"""Model-agnostic, tensor-native calibration: scores, conformal calibrators, typed sets and metrics.

Calibrator state lives in buffers so that it travels in ``state_dict``. See ``DESIGN.md`` section 5.
"""

from __future__ import annotations

from .metrics import coverage, mean_width, winkler_score
from .quantile import check_alpha, conformal_quantile, conformal_rank
from .scores import SCORES, AbsoluteResidual, NormalizedResidual, Score
from .sets import Interval, PredictionSet
from .split import CALIBRATORS, SplitConformal, calibrator_from_dict

__all__ = [
    "CALIBRATORS",
    "SCORES",
    "AbsoluteResidual",
    "Interval",
    "NormalizedResidual",
    "PredictionSet",
    "Score",
    "SplitConformal",
    "calibrator_from_dict",
    "check_alpha",
    "conformal_quantile",
    "conformal_rank",
    "coverage",
    "mean_width",
    "winkler_score",
]
