"""Model-agnostic, tensor-native calibration: scores, conformal calibrators, typed sets and metrics.

Calibrator state lives in buffers so that it travels in ``state_dict``. See ``DESIGN.md`` section 5.
"""

from __future__ import annotations

from .aci import ACI
from .classification import APS, CLASSIFICATION_SCORES, LAC, RAPS, ClassificationScore
from .metrics import (
    coverage,
    group_coverage,
    long_run_coverage,
    mean_width,
    rolling_coverage,
    set_size,
    winkler_score,
    worst_group_coverage,
)
from .mondrian import MondrianConformal
from .online import OnlineCalibrator, QuantileTracker
from .quantile import check_alpha, conformal_quantile, conformal_rank
from .scores import CQR, SCORES, AbsoluteResidual, IntervalScore, NormalizedResidual, Score, get_score
from .sets import Box, Interval, LabelSet, PredictionSet
from .split import CALIBRATORS, SplitConformal, calibrator_from_dict

__all__ = [
    "ACI",
    "APS",
    "CALIBRATORS",
    "CLASSIFICATION_SCORES",
    "CQR",
    "LAC",
    "RAPS",
    "SCORES",
    "AbsoluteResidual",
    "Box",
    "ClassificationScore",
    "Interval",
    "IntervalScore",
    "LabelSet",
    "MondrianConformal",
    "NormalizedResidual",
    "OnlineCalibrator",
    "PredictionSet",
    "QuantileTracker",
    "Score",
    "SplitConformal",
    "calibrator_from_dict",
    "check_alpha",
    "conformal_quantile",
    "conformal_rank",
    "coverage",
    "get_score",
    "group_coverage",
    "long_run_coverage",
    "mean_width",
    "rolling_coverage",
    "set_size",
    "winkler_score",
    "worst_group_coverage",
]
