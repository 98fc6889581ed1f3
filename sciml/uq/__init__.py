"""Model-agnostic, tensor-native calibration: scores, conformal calibrators, typed sets and metrics.

Calibrator state lives in buffers so that it travels in ``state_dict``. See ``DESIGN.md`` section 5.
"""

from __future__ import annotations

from .aci import ACI
from .classification import APS, CLASSIFICATION_SCORES, LAC, RAPS, ClassificationScore
from .ellipsoid import Ellipsoid
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
from .pid import ConformalPID, pid_bound
from .quantile import check_alpha, conformal_quantile, conformal_rank
from .scores import CQR, SCORES, AbsoluteResidual, IntervalScore, NormalizedResidual, Score, get_score
from .sets import Box, Interval, LabelSet, PredictionSet
from .sf_ogd import SFOGD, sf_ogd_bound
from .slab import Slab, worst_slab_coverage
from .spi import SPIConformal, rank_pmf, rank_windows
from .split import CALIBRATORS, SplitConformal, calibrator_from_dict
from .vector import VECTOR_SCORES, Mahalanobis, SupNorm, VectorScore, upper_triangle, vector_score_from_dict

__all__ = [
    "ACI",
    "APS",
    "CALIBRATORS",
    "CLASSIFICATION_SCORES",
    "CQR",
    "LAC",
    "RAPS",
    "SCORES",
    "SFOGD",
    "VECTOR_SCORES",
    "AbsoluteResidual",
    "Box",
    "ClassificationScore",
    "ConformalPID",
    "Ellipsoid",
    "Interval",
    "IntervalScore",
    "LabelSet",
    "Mahalanobis",
    "MondrianConformal",
    "NormalizedResidual",
    "OnlineCalibrator",
    "PredictionSet",
    "QuantileTracker",
    "SPIConformal",
    "Score",
    "Slab",
    "SplitConformal",
    "SupNorm",
    "VectorScore",
    "calibrator_from_dict",
    "check_alpha",
    "conformal_quantile",
    "conformal_rank",
    "coverage",
    "get_score",
    "group_coverage",
    "long_run_coverage",
    "mean_width",
    "pid_bound",
    "rank_pmf",
    "rank_windows",
    "rolling_coverage",
    "set_size",
    "sf_ogd_bound",
    "upper_triangle",
    "vector_score_from_dict",
    "winkler_score",
    "worst_group_coverage",
    "worst_slab_coverage",
]
