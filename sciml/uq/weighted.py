r"""Weighted split conformal prediction under covariate shift (Tibshirani, Barber, Candès, Ramdas 2019).

If test inputs follow ``p_test(x)`` while calibration inputs follow ``p_cal(x)`` and ``y | x`` is unchanged,
the split-conformal threshold for a test point ``x`` is the weighted quantile (their eq. (7))

.. math::  \hat q(x) = Q_{1-α}\Big(\sum_{i=1}^n p_i(x) δ_{s_i} + p_{n+1}(x) δ_{+∞}\Big), \quad
           p_i(x) = \frac{w(x_i)}{\sum_j w(x_j) + w(x)}, \quad p_{n+1}(x) = \frac{w(x)}{\sum_j w(x_j) + w(x)},

with ``w = p_test/p_cal``: the smallest ``s_(k)`` whose cumulative calibration weight reaches
``(1-α)(W + w(x))``, ``W = Σ_i w(x_i)``, and ``+∞`` when no ``k`` does. With the true ratio,
``P(Y ∈ C(X)) >= 1 - α``; with equal weights it is the plain split-conformal quantile.

The ratio is estimated from embeddings by a probabilistic classifier of "test batch" against "calibration"
(their §2.2): L2-regularised logistic regression on standardised embeddings (projected on their top principal
components when ``d`` is large), ``w(x) = (n_cal/n_test) · P(test|x)/P(cal|x)``, clipped to
``[1/clip, clip]``. Probabilities are out-of-fold (``n_folds``-fold cross-fitting), so a classifier that
memorises its own training points does not fake a shift on exchangeable data.

**Choice of the regularisation (``C="auto"``, the default).** How much the classifier may bend decides how
peaked the weights get: a weak penalty lets it separate a few calibration points from the batch and puts
near-all weight on them (ESS collapse), a strong one returns weights near 1 and ignores a real shift. Inside
each cross-fitting fold the inverse L2 strength is chosen from the fixed grid ``C_GRID = logspace(-3, 2, 11)``
by 3-fold inner cross-validated log-loss of the classifier on that fold's training rows only, i.e. by the
ratio model's own held-out likelihood (the standard model selection for a probabilistic classifier; the ratio
is the classifier's odds, Tibshirani et al. 2019 §2.2, so a better-calibrated classifier is a better ratio
estimate). Coverage never enters the choice; ties go to the strongest penalty (smallest ``C``). When a fold's
training rows hold fewer than 2 of either class the inner split is impossible and ``C = 1`` (the former fixed
default) is used. A number ``C`` skips the search.

**Effective-sample-size guard.** ``ESS = (Σ w_i)²/Σ w_i²`` of the calibration weights is the number of
equally weighted points the weighted quantile is worth. An estimated ratio is least reliable exactly when a
few calibration points carry all the weight, so when ``ESS < max(min_ess, (1-α)/α)`` (the second term is the
smallest ``n`` with a finite plain quantile at ``α``) every threshold is ``+∞``: no claim rather than a falsely
confident one. The coverage of a quantile of ``ESS`` equally weighted scores, given those scores, has standard
deviation about ``sqrt(α(1-α)/ESS)``; the default ``min_ess = 50`` keeps it below 0.043 at ``α = 0.1``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ._checks import finite_real, is_int
from .domain import check_embeddings
from .quantile import check_alpha, weighted_quantile

__all__ = [
    "GroupedThresholds",
    "WeightedThresholds",
    "density_ratio",
    "effective_sample_size",
    "grouped_weighted_thresholds",
    "weighted_conformal_threshold",
    "weighted_thresholds",
]

_TOL = 1e-12  # same level tolerance as weighted_quantile
C_GRID = tuple(float(c) for c in np.logspace(-3, 2, 11))  # candidate inverse L2 strengths of C="auto"
_INNER_FOLDS = 3  # inner cross-validation folds of C="auto"
_C_FALLBACK = 1.0  # C when a fold is too small for the inner split (the fixed default before "auto")


@dataclass(frozen=True)
class WeightedThresholds:
    """Per-test-point thresholds of weighted split conformal, with the weights behind them.

    Attributes
    ----------
    thresholds : torch.Tensor
        Shape ``(m,)``, in score units; ``+inf`` where no finite threshold is valid (all of them when
        ``guarded``). Use as ``q`` in a score's ``interval(pred, q, sigma)``.
    cal_weights, test_weights : torch.Tensor
        Estimated ``w(x) = p_test(x)/p_cal(x)``, shapes ``(n,)`` and ``(m,)``.
    ess : float
        Effective sample size ``(Σ w_i)²/Σ w_i²`` of ``cal_weights``.
    ess_floor : float
        The floor ``max(min_ess, (1-α)/α)``.
    guarded : bool
        ``True`` when ``ess < ess_floor`` and every threshold was set to ``+inf``.
    C : tuple of float
        Inverse L2 strength of the density-ratio classifier in each cross-fitting fold (chosen by held-out
        log-loss with ``C="auto"``, else the given value repeated).

    """

    thresholds: Tensor
    cal_weights: Tensor
    test_weights: Tensor
    ess: float
    ess_floor: float
    guarded: bool
    C: tuple = ()

    @property
    def infinite(self) -> Tensor:
        """Bool ``(m,)``: ``True`` where the interval is unbounded (no guarantee-preserving finite set)."""
        return torch.isinf(self.thresholds)


def effective_sample_size(weights: Tensor) -> float:
    """Kish effective sample size ``(Σ w)²/Σ w²`` of non-negative weights ``(n,)``; ``n`` for equal weights."""
    w = weights.double()
    return float(w.sum() ** 2 / (w * w).sum()) if w.numel() and (w > 0).any() else 0.0


def weighted_conformal_threshold(cal_scores: Tensor, cal_weights: Tensor, test_weights: Tensor, alpha: float) -> Tensor:
    """Weighted conformal quantile with the test point's own weight on ``+∞`` (module docstring).

    Parameters
    ----------
    cal_scores : torch.Tensor
        Calibration scores, shape ``(n,)``, finite.
    cal_weights : torch.Tensor
        ``w(x_i) >= 0``, shape ``(n,)``, not all zero.
    test_weights : torch.Tensor
        ``w(x) >= 0`` of each test point, shape ``(m,)``.
    alpha : float
        Miscoverage in ``(0, 1)``.

    Returns
    -------
    torch.Tensor
        Thresholds, shape ``(m,)``, dtype of ``cal_scores``; ``+inf`` where ``(1-α)(W + w(x)) > W``.

    """
    alpha = check_alpha(alpha)
    _vector(cal_scores, "cal_scores")
    _vector(cal_weights, "cal_weights", cal_scores.numel())
    _vector(test_weights, "test_weights")
    if (cal_weights < 0).any() or (test_weights < 0).any() or not (cal_weights > 0).any():
        raise ValueError("weights must be >= 0 and some calibration weight must be > 0")
    total = cal_weights.double().sum()
    levels = (1 - alpha) * (1 + test_weights.double() / total)
    q = weighted_quantile(cal_scores, cal_weights.double() / total, levels).to(cal_scores.dtype)
    return torch.where(levels > 1 + _TOL, torch.full_like(q, math.inf), q)


@dataclass(frozen=True)
class GroupedThresholds:
    """Weighted conformal thresholds computed within groups (Mondrian), with a per-group ESS guard.

    Attributes
    ----------
    thresholds : torch.Tensor
        ``(m,)``; ``+inf`` where the test point's group is guarded or has no calibration point.
    ess : dict
        Kish effective sample size of each calibrated group present among the test points (``{group: ess}``).
    floors : dict
        The ESS floor each of those groups was held to.
    guarded : list
        Groups whose thresholds were set to ``+inf`` because ``ess < floor``.

    """

    thresholds: Tensor
    ess: dict
    floors: dict
    guarded: list


def grouped_weighted_thresholds(cal_scores: Tensor, cal_weights: Tensor, cal_groups: Tensor, test_weights: Tensor,
                                test_groups: Tensor, alpha: float, min_ess: float = 50.0) -> GroupedThresholds:
    """Weighted split conformal within each group, guarded by each group's effective sample size.

    For every group ``g`` of the test points, the threshold of test point ``j`` is the weighted quantile of the
    group's calibration scores with ``w(x_j)`` on ``+∞`` (:func:`weighted_conformal_threshold`; Tibshirani et al.
    2019). A density ratio estimated once on the whole batch differs from the within-group ratio by a constant
    per group, which the normalised weights cancel. Guard: when the Kish ESS of the group's ``n_g`` calibration
    weights is below ``max((1-α)/α, min(min_ess, n_g/2))``, every threshold of the group is ``+∞`` — ``(1-α)/α``
    is the smallest calibration set with a finite plain quantile, ``min_ess`` bounds the coverage noise of a large
    group, ``n_g/2`` keeps a small group usable unless the weighting halves it. No claim rather than false
    confidence.

    Parameters
    ----------
    cal_scores, cal_weights : torch.Tensor
        Calibration scores and their density-ratio weights, ``(n,)``.
    cal_groups : torch.Tensor
        Group label of each calibration score, int64 ``(n,)`` (all zeros without groups).
    test_weights, test_groups : torch.Tensor
        Weight and group of each test point, ``(m,)``.
    alpha : float
        Miscoverage in ``(0, 1)``.
    min_ess : float
        ESS floor of large groups, ``>= 0``.

    """
    alpha = check_alpha(alpha)
    if not min_ess >= 0:
        raise ValueError(f"min_ess must be >= 0, got {min_ess}")
    q = torch.full((test_groups.numel(),), math.inf, dtype=torch.float64)
    ess, floors, guarded = {}, {}, []
    for g in sorted(set(test_groups.tolist())):
        cal, rows = cal_groups == g, test_groups == g
        if not cal.any():
            continue  # a group never calibrated has no bound
        ess[g] = effective_sample_size(cal_weights[cal])
        floors[g] = max((1 - alpha) / alpha, min(float(min_ess), int(cal.sum()) / 2))
        if ess[g] < floors[g]:
            guarded.append(g)
            continue
        q[rows] = weighted_conformal_threshold(cal_scores[cal].double(), cal_weights[cal], test_weights[rows], alpha)
    return GroupedThresholds(q, ess, floors, guarded)


def density_ratio(
    cal_emb: Tensor,
    test_emb: Tensor,
    *,
    n_components: int | None = 16,
    C: float | str = "auto",
    n_folds: int = 5,
    clip: float = 1e3,
    seed: int = 0,
) -> tuple[Tensor, Tensor]:
    """Estimate ``w(x) = p_test(x)/p_cal(x)`` at calibration and test embeddings by logistic regression.

    Parameters
    ----------
    cal_emb, test_emb : torch.Tensor
        Embeddings, shapes ``(n, d)`` and ``(m, d)``, finite.
    n_components : int or None
        If ``d`` exceeds it, classify on this many principal components of the pooled standardised embeddings.
    C : float or "auto"
        Inverse L2 strength of the logistic regression (scikit-learn convention), or ``"auto"``: chosen in each
        cross-fitting fold from :data:`C_GRID` by inner cross-validated log-loss (module docstring).
    n_folds : int
        Cross-fitting folds (each point's probability comes from a model not trained on it); 1 = in-sample.
    clip : float
        Weights are clipped to ``[1/clip, clip]``, ``clip > 1``.
    seed : int
        Seed of the fold assignment (outer and inner).

    Returns
    -------
    tuple of torch.Tensor
        ``(cal_weights (n,), test_weights (m,))``, float64.

    """
    w_cal, w_test, _ = _fit_ratio(cal_emb, test_emb, n_components, C, n_folds, clip, seed)
    return w_cal, w_test


def _fit_ratio(cal_emb: Tensor, test_emb: Tensor, n_components: int | None, C: float | str, n_folds: int,
               clip: float, seed: int) -> tuple[Tensor, Tensor, tuple]:
    """:func:`density_ratio` plus the ``C`` used in each cross-fitting fold."""
    from sklearn.model_selection import StratifiedKFold

    cal, test = check_embeddings(cal_emb, "cal_emb"), check_embeddings(test_emb, "test_emb", cal_emb.shape[1])
    n, m = cal.shape[0], test.shape[0]
    if not is_int(n_folds) or n_folds < 1 or min(n, m) < max(2, n_folds):
        raise ValueError(
            f"density_ratio needs n_folds >= 1 and at least max(2, n_folds={n_folds}) calibration and "
            f"test rows, got n_folds={n_folds!r}, {n} and {m} rows: predict a larger batch"
        )
    if C != "auto" and (isinstance(C, str) or finite_real(C, "C") <= 0):
        raise ValueError(f"C must be a number > 0 or 'auto', got C={C!r}")
    if finite_real(clip, "clip") <= 1:
        raise ValueError(f"clip must be > 1, got clip={clip!r}")
    x = torch.cat([cal, test]).cpu()
    x = (x - x.mean(0)) / x.std(0).clamp_min(1e-12)
    if n_components is not None and x.shape[1] > n_components:
        x = x @ torch.linalg.svd(x, full_matrices=False).Vh[:n_components].T
    xs, label = x.numpy(), np.r_[np.zeros(n, dtype=int), np.ones(m, dtype=int)]
    logit, chosen = np.empty(n + m), []
    folds = (
        [(np.arange(n + m), np.arange(n + m))]
        if n_folds == 1
        else StratifiedKFold(n_folds, shuffle=True, random_state=seed).split(xs, label)
    )
    for fit_idx, out_idx in folds:
        c = _select_c(xs[fit_idx], label[fit_idx], seed) if C == "auto" else float(C)
        logit[out_idx] = _logreg(c).fit(xs[fit_idx], label[fit_idx]).decision_function(xs[out_idx])
        chosen.append(c)  # logit = log P(test|x)/P(cal|x)
    log_w = np.clip(logit + math.log(n / m), -math.log(clip), math.log(clip))
    w = torch.from_numpy(np.exp(log_w))
    return w[:n], w[n:], tuple(chosen)


def _logreg(c: float, warm_start: bool = False):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=c, max_iter=1000, warm_start=warm_start)


def _select_c(xs: np.ndarray, label: np.ndarray, seed: int) -> float:
    """The ``C`` of :data:`C_GRID` with the smallest inner cross-validated log-loss (ties: smallest ``C``).

    Written out rather than ``LogisticRegressionCV``, whose penalty, scoring and ``C_`` conventions change between
    the scikit-learn versions the package allows (>= 1.3); same folds for every ``C``, shuffled with ``seed``.
    """
    from sklearn.model_selection import StratifiedKFold

    k = min(_INNER_FOLDS, int(np.bincount(label, minlength=2).min()))
    if k < 2:
        return _C_FALLBACK
    loss = np.zeros(len(C_GRID))
    for fit_idx, out_idx in StratifiedKFold(k, shuffle=True, random_state=seed).split(xs, label):
        clf = _logreg(C_GRID[0], warm_start=True)  # ascending C: each fit starts from the previous solution
        for i, c in enumerate(C_GRID):
            z = clf.set_params(C=c).fit(xs[fit_idx], label[fit_idx]).decision_function(xs[out_idx])
            loss[i] += np.logaddexp(0.0, np.where(label[out_idx] == 1, -z, z)).sum()  # −log-likelihood
    return C_GRID[int(np.argmin(loss))]


def weighted_thresholds(
    cal_scores: Tensor,
    cal_emb: Tensor,
    test_emb: Tensor,
    alpha: float = 0.1,
    *,
    min_ess: float = 50.0,
    n_components: int | None = 16,
    C: float | str = "auto",
    n_folds: int = 5,
    clip: float = 1e3,
    seed: int = 0,
) -> WeightedThresholds:
    """Shift-aware thresholds for a batch: estimated ratio, weighted quantile, ESS guard.

    Parameters
    ----------
    cal_scores : torch.Tensor
        Calibration nonconformity scores ``(n,)``, row-aligned with ``cal_emb``.
    cal_emb, test_emb : torch.Tensor
        Embeddings ``(n, d)`` of the calibration inputs and ``(m, d)`` of the batch to predict.
    alpha : float
        Miscoverage in ``(0, 1)``.
    min_ess : float
        Smallest acceptable effective sample size; the floor is ``max(min_ess, (1-α)/α)``. Calibration sets
        smaller than the floor are always guarded: lower it for them knowingly.
    n_components, C, n_folds, clip, seed
        Passed to :func:`density_ratio`.

    Returns
    -------
    WeightedThresholds
        Thresholds ``(m,)`` and the diagnostics.

    """
    alpha = check_alpha(alpha)
    _vector(cal_scores, "cal_scores", check_embeddings(cal_emb, "cal_emb").shape[0])
    if finite_real(min_ess, "min_ess") < 0:
        raise ValueError(f"min_ess must be >= 0, got {min_ess!r}")
    w_cal, w_test, chosen = _fit_ratio(cal_emb, test_emb, n_components, C, n_folds, clip, seed)
    ess, floor = effective_sample_size(w_cal), max(float(min_ess), (1 - alpha) / alpha)
    q = weighted_conformal_threshold(cal_scores.double(), w_cal, w_test, alpha)
    guarded = ess < floor
    if guarded:
        q = torch.full_like(q, math.inf)
    return WeightedThresholds(q.to(cal_scores.dtype), w_cal, w_test, ess, floor, guarded, chosen)


def _vector(x: Tensor, name: str, n: int | None = None) -> None:
    if not isinstance(x, Tensor) or x.dim() != 1 or not x.is_floating_point() or x.numel() == 0:
        raise ValueError(f"{name} must be a non-empty 1-D floating tensor")
    if n is not None and x.numel() != n:
        raise ValueError(f"{name} has {x.numel()} entries, expected {n} (one per calibration row)")
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} must be finite (no NaN or inf)")
