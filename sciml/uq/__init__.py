"""Model-agnostic, tensor-native calibration: scores, conformal calibrators, typed sets and metrics.

The modules at this level are what the shipped models rely on (split, Mondrian and multi-group calibrators,
weighted conformal under shift, vector scores, the domain test, sets, quantiles, metrics); ``catalogue/`` holds
the methods no family uses (online, classification, small-sample, human–AI, ...). Every public name of both is
importable from here. Calibrator state lives in buffers so that it travels in ``state_dict``
(``docs/calibration.md``). Imports nothing else of sciml.
"""

from __future__ import annotations

from .catalogue.aci import ACI
from .catalogue.active_ppi import PPIEstimate, active_ppi_mean, query_probabilities
from .catalogue.classification import APS, CLASSIFICATION_SCORES, LAC, RAPS, ClassificationScore
from .catalogue.cop import COP, cop_bound
from .catalogue.fair import FairConformal, afcp_select
from .catalogue.human_ai import HumanAIConformal, OnlineHumanAI, collaborative_set, human_ai_bound
from .catalogue.label_cost import expected_size, stopping_size
from .catalogue.online import OnlineCalibrator, QuantileTracker
from .catalogue.pid import ConformalPID, pid_bound
from .catalogue.rescp import ResCP
from .catalogue.sf_ogd import SFOGD, sf_ogd_bound
from .catalogue.slab import Slab, worst_slab_coverage
from .catalogue.snap import SnapUQ, isotonic_fit, isotonic_predict
from .catalogue.spi import SPIConformal, rank_pmf, rank_windows
from .catalogue.up_ocp import UPOCP
from .conditional import ConditionalConformal, quantile_regression
from .domain import DomainScore, knn_distance
from .ellipsoid import Ellipsoid
from .hurdle import HurdleConformal
from .hurdle_groups import ConditionalHurdleConformal
from .metrics import (
    bounded_width,
    coverage,
    coverage_miss_probability,
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
from .quantile import check_alpha, conformal_pvalues, conformal_quantile, conformal_rank, weighted_quantile
from .scores import CQR, SCORES, AbsoluteResidual, IntervalScore, NormalizedResidual, Score, get_score
from .sets import Box, Interval, LabelSet, PredictionSet, ZeroOrInterval
from .split import CALIBRATORS, SplitConformal, calibrator_from_dict
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
    "ConditionalConformal",
    "ConditionalHurdleConformal",
    "HurdleConformal",
    "quantile_regression",
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
    "coverage_miss_probability",
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
    "ZeroOrInterval",
    "bounded_width",
]
