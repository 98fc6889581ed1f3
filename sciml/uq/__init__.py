"""Model-agnostic, tensor-native calibration: scores, conformal calibrators, typed sets and metrics.

Calibrator state lives in buffers so that it travels in ``state_dict``. See ``docs/design.md`` §5.
"""

from __future__ import annotations

from .aci import ACI
from .active_ppi import PPIEstimate, active_ppi_mean, query_probabilities
from .classification import APS, CLASSIFICATION_SCORES, LAC, RAPS, ClassificationScore
from .cop import COP, cop_bound
from .domain import DomainScore, knn_distance
from .ellipsoid import Ellipsoid
from .fair import FairConformal, afcp_select, conformal_pvalues
from .human_ai import HumanAIConformal, OnlineHumanAI, collaborative_set, human_ai_bound
from .label_cost import expected_size, stopping_size
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
from .multigroup import MultiGroupConformal
from .online import OnlineCalibrator, QuantileTracker
from .pid import ConformalPID, pid_bound
from .quantile import check_alpha, conformal_quantile, conformal_rank
from .rescp import ResCP, weighted_quantile
from .scores import CQR, SCORES, AbsoluteResidual, IntervalScore, NormalizedResidual, Score, get_score
from .sets import Box, Interval, LabelSet, PredictionSet
from .sf_ogd import SFOGD, sf_ogd_bound
from .slab import Slab, worst_slab_coverage
from .snap import SnapUQ, isotonic_fit, isotonic_predict
from .spi import SPIConformal, rank_pmf, rank_windows
from .split import CALIBRATORS, SplitConformal, calibrator_from_dict
from .up_ocp import UPOCP
from .vector import VECTOR_SCORES, Mahalanobis, SupNorm, VectorScore, upper_triangle, vector_score_from_dict
from .weighted import (
    GroupedThresholds,
    WeightedThresholds,
    density_ratio,
    effective_sample_size,
    grouped_weighted_thresholds,
    weighted_conformal_threshold,
    weighted_thresholds,
)

__all__ = [
    "ACI",
    "APS",
    "CALIBRATORS",
    "CLASSIFICATION_SCORES",
    "COP",
    "CQR",
    "LAC",
    "RAPS",
    "SCORES",
    "SFOGD",
    "UPOCP",
    "VECTOR_SCORES",
    "AbsoluteResidual",
    "Box",
    "ClassificationScore",
    "ConformalPID",
    "DomainScore",
    "Ellipsoid",
    "FairConformal",
    "HumanAIConformal",
    "Interval",
    "IntervalScore",
    "LabelSet",
    "Mahalanobis",
    "MondrianConformal",
    "MultiGroupConformal",
    "NormalizedResidual",
    "OnlineCalibrator",
    "OnlineHumanAI",
    "PPIEstimate",
    "PredictionSet",
    "QuantileTracker",
    "ResCP",
    "SPIConformal",
    "Score",
    "Slab",
    "SnapUQ",
    "SplitConformal",
    "SupNorm",
    "VectorScore",
    "GroupedThresholds",
    "WeightedThresholds",
    "active_ppi_mean",
    "afcp_select",
    "calibrator_from_dict",
    "check_alpha",
    "collaborative_set",
    "conformal_pvalues",
    "conformal_quantile",
    "conformal_rank",
    "cop_bound",
    "coverage",
    "density_ratio",
    "effective_sample_size",
    "expected_size",
    "get_score",
    "group_coverage",
    "human_ai_bound",
    "isotonic_fit",
    "isotonic_predict",
    "knn_distance",
    "long_run_coverage",
    "mean_width",
    "pid_bound",
    "query_probabilities",
    "rank_pmf",
    "rank_windows",
    "rolling_coverage",
    "set_size",
    "sf_ogd_bound",
    "stopping_size",
    "upper_triangle",
    "vector_score_from_dict",
    "grouped_weighted_thresholds",
    "weighted_conformal_threshold",
    "weighted_quantile",
    "weighted_thresholds",
    "winkler_score",
    "worst_group_coverage",
    "worst_slab_coverage",
]
