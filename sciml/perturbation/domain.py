r"""Applicability domain of a perturbation model: known control cells, known perturbation.

A perturbation model is trained on a few dozen *conditions*, so a conformal novelty test over conditions
(calibrated on the held-out calib conditions, six for ``checkpoints/grn-default``) cannot even reach
``β = 0.05``: the smallest conformal p-value is ``1/(n_cal + 1)``. Two things decide whether a prediction can be
trusted, and each is tested where there is enough data to test it honestly:

1. **The control cells the user supplies** (the model's input: every generated cell starts from one). A
   :class:`sciml.uq.domain.DomainScore` (k-NN conformal novelty test) runs on the cells in the model's input
   space (log1p expression of the measured genes) projected on the top principal components of the reference
   cells. Reference and calibration are a seeded random split of the *training control cells* (hundreds of
   cells), so the per-cell p-value ``p_i`` is a valid conformal p-value: a control cell exchangeable with the
   training controls has ``P(p_i <= u) <= u``. The projection and the reference are fitted on the reference
   half only, so the calibration half's scores are exchangeable with a new cell's.

   The cells of one call are combined into one **batch p-value** ``p = min(1, 2 · median_i p_i)`` (the
   "twice the median" rule: valid under *arbitrary* dependence between the ``p_i``, Rüschendorf 1982; Meng 1994;
   Vovk & Wang 2020, "Combining p-values via averaging"). Conformal p-values sharing a calibration set are
   dependent, which rules out Fisher's method; Simes is valid for them too (they are PRDS, Bates et al. 2023)
   but is driven by the few most unusual cells, where the median rule asks whether the *typical* supplied
   control cell is unlike the training controls: a handful of doublets does not condemn a screen, a different
   cell state or protocol does. An exchangeable control population is flagged (``p <= β``) with probability
   at most ``β``; the rule needs ``n_cal >= 2/β - 1`` calibration cells to ever flag.

2. **The perturbation itself**, by explicit rules (extrapolations, out of domain whatever the cells): a gene
   never perturbed in a training condition, and a double one of whose singles was not a training condition
   (the model's combination prior and the additive reference both rest on measured single effects).

Every condition of one call shares the control population, so it shares the batch p-value; ``in_domain`` is
``p > β`` and no rule broken. A condition that breaks a rule is out of domain whatever the cells, and its p-value is
NaN: the test of the cells says nothing about a perturbation the model never saw.

Size of ``domain.json``: ``c·G + G`` (projection) ``+ r·c + 2c + n_cal`` floats,
with ``c <= max_components`` and ``r <= max_reference`` (``grn-default``: about 0.6 MB).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sciml.perturbation.data.conditions import parse_condition
from sciml.uq.domain import DomainScore

__all__ = ["FILE", "PerturbationDomain", "batch_pvalue", "domain_lines", "domain_summary", "fit_domain",
           "out_of_domain_note", "rule_reasons"]

FORMAT_VERSION = 1
FILE = "domain.json"
KEYS = {"format_version", "method", "seed", "control_label", "pca_mean", "components", "domain",
        "train_conditions", "n_control_cells"}
NO_GUARANTEE = "the effect band carries no guarantee"
PROJECT_ENTRIES = 2**21  # cells x genes projected at once (bounds the float64 copy)


def rule_reasons(label: str, train_conditions: Sequence[str], control_label: str = "ctrl") -> list[str]:
    """Why condition ``label`` extrapolates beyond the training perturbations (``[]`` when it does not).

    A gene in no training condition, and a double one of whose singles (``A+ctrl``) was not a training condition.
    """
    genes = parse_condition(label, control_label)
    trained = [parse_condition(c, control_label) for c in train_conditions]
    seen = {g for c in trained for g in c}
    never = [g for g in genes if g not in seen]
    out = [f"never perturbed in training: {' '.join(never)} (graph embedding only)"] if never else []
    missing = [g for g in genes if (g,) not in trained and g not in never] if len(genes) == 2 else []
    if missing:
        out.append(f"single never measured in training: {' '.join(missing)}")
    return out


def out_of_domain_note(reasons: Sequence[str]) -> str:
    """One-line note of a flagged condition (``""`` when ``reasons`` is empty)."""
    return f"out of domain ({'; '.join(reasons)}): {NO_GUARANTEE}" if reasons else ""


def batch_pvalue(pvalues: np.ndarray) -> float:
    """``min(1, 2 · median(p))``: a valid p-value under arbitrary dependence of the cells' ``p`` ``(m,)``."""
    p = np.asarray(pvalues, dtype=np.float64)
    if p.ndim != 1 or p.size == 0:
        raise ValueError("batch_pvalue needs a non-empty 1-d array of p-values")
    return float(min(1.0, 2.0 * np.median(p)))


@dataclass
class PerturbationDomain:
    """Control-cell novelty test and perturbation rules of one perturbation model (module docstring).

    Attributes
    ----------
    score : DomainScore
        Novelty test on projected control cells (reference and calibration: training control cells).
    pca_mean : numpy.ndarray
        ``(G,)`` mean of the reference cells (log1p).
    components : numpy.ndarray
        ``(c, G)`` orthonormal principal directions of the reference cells.
    train_conditions : list of str
        Canonical labels of the training conditions (``A+ctrl``, ``A+B``).
    control_label : str
        Control label of the training data (parses ``A+ctrl``).
    seed : int
        Seed of the reference/calibration split and the coreset draw.
    n_control_cells : int
        Training control cells the test was fitted on (reference + calibration).

    """

    score: DomainScore
    pca_mean: np.ndarray
    components: np.ndarray
    train_conditions: list[str]
    control_label: str = "ctrl"
    seed: int = 0
    n_control_cells: int = 0

    @property
    def beta(self) -> float:
        """Default flag level ``β``."""
        return self.score.beta

    def project(self, x: np.ndarray) -> torch.Tensor:
        """Cells ``(m, G)`` log1p → principal-component coordinates ``(m, c)`` float64."""
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != self.pca_mean.size:
            raise ValueError(f"control cells must have shape (m, {self.pca_mean.size}), got {x.shape}")
        rows = max(1, PROJECT_ENTRIES // x.shape[1])  # float64 a block of cells at a time, not the whole copy
        return torch.from_numpy(np.concatenate(
            [(x[i:i + rows].astype(np.float64) - self.pca_mean) @ self.components.T for i in range(0, len(x), rows)]
            or [np.zeros((0, len(self.components)))]))

    def cell_pvalues(self, x: np.ndarray) -> np.ndarray:
        """Conformal p-value of each control cell ``(m, G)``; shape ``(m,)``."""
        return self.score.pvalue(self.project(x)).numpy()

    def control_pvalue(self, x: np.ndarray) -> float:
        """Batch p-value of a control population ``(m, G)`` (:func:`batch_pvalue` of the cells' p-values)."""
        return batch_pvalue(self.cell_pvalues(x))

    def rule_reasons(self, label: str) -> list[str]:
        """Why a condition extrapolates beyond the training perturbations (:func:`rule_reasons`)."""
        return rule_reasons(label, self.train_conditions, self.control_label)

    def assess(self, labels: Sequence[str], ctrl: np.ndarray, beta: float | None = None) -> dict[str, list]:
        """``domain_pvalue``, ``in_domain`` and one-line ``note`` per condition label, given the controls.

        ``domain_pvalue`` is the control population's batch p-value for a condition within the training
        perturbations, and NaN for one a rule flags (an extrapolation has no p-value: its note says why).
        """
        beta = self.beta if beta is None else beta
        p = self.control_pvalue(ctrl)
        out: dict[str, list] = {"domain_pvalue": [], "in_domain": [], "note": []}
        for label in labels:
            reasons = self.rule_reasons(label)
            extrapolates = bool(reasons)
            if p <= beta:
                reasons.append(f"control cells unlike the training controls, p {p:.3g} <= {beta:g}")
            out["domain_pvalue"].append(float("nan") if extrapolates else p)
            out["in_domain"].append(not reasons)
            out["note"].append(out_of_domain_note(reasons))
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe state (the content of ``domain.json``)."""
        return {"format_version": FORMAT_VERSION, "method": "control_knn_conformal_median", "seed": self.seed,
                "control_label": self.control_label, "n_control_cells": self.n_control_cells,
                "pca_mean": self.pca_mean.tolist(), "components": self.components.tolist(),
                "domain": self.score.to_dict(), "train_conditions": list(self.train_conditions)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PerturbationDomain:
        """Rebuild from :meth:`to_dict` output; ``ValueError`` naming the field on anything malformed."""
        if not isinstance(d, Mapping) or set(d) != KEYS:
            raise ValueError(f"expected the keys {sorted(KEYS)}")
        if d["format_version"] != FORMAT_VERSION:
            raise ValueError(f"format_version {d['format_version']!r} is not supported (reads {FORMAT_VERSION})")
        for key in ("seed", "n_control_cells"):
            if not isinstance(d[key], int) or isinstance(d[key], bool):
                raise ValueError(f"'{key}' must be an integer, got {d[key]!r}")
        if not isinstance(d["control_label"], str):
            raise ValueError("'control_label' must be a string")
        conds = d["train_conditions"]
        if not isinstance(conds, list) or not conds or not all(isinstance(c, str) for c in conds):
            raise ValueError("'train_conditions' must be a non-empty list of condition labels")
        score = DomainScore.from_dict(d["domain"])
        mean = _array(d["pca_mean"], "pca_mean", 1)
        comp = _array(d["components"], "components", 2)
        if comp.shape != (score.dim, mean.size):
            raise ValueError(f"'components' must have shape ({score.dim}, {mean.size}), got {comp.shape}")
        return cls(score, mean, comp, list(conds), d["control_label"], d["seed"], d["n_control_cells"])


def domain_summary(domain: PerturbationDomain) -> dict:
    """What ``metadata.json`` records about ``domain.json``."""
    d = domain.score
    return {"file": FILE, "method": "control_knn_conformal_median", "k": d.k, "beta": d.beta,
            "n_components": d.dim, "n_reference": int(d.reference.shape[0]), "n_calib": d.n_calib,
            "n_control_cells": domain.n_control_cells, "n_train_conditions": len(domain.train_conditions),
            "seed": domain.seed}


def domain_lines(domain: PerturbationDomain, how: str) -> list[str]:
    """Model-card bullet on the applicability domain: what it is, how it was made."""
    d = domain.score
    return [f"- Applicability domain (`domain.json`, {how}): k-NN conformal novelty test (k={d.k}) on the control "
            f"cells given to `perturbation predict`, in {d.dim} principal components of log1p expression; reference "
            f"{d.reference.shape[0]} and calibration {d.n_calib} of the {domain.n_control_cells} training control "
            f"cells (seed {domain.seed}); batch p-value 2·median of the cells' p-values. A condition is out of "
            f"domain when p <= {d.beta:g} (an exchangeable control population is flagged with probability <= "
            f"{d.beta:g}), when a gene was never perturbed in training, or when a double's single was not a training "
            "condition; its band carries no guarantee."]


def _array(raw: object, name: str, ndim: int) -> np.ndarray:
    try:
        arr = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name!r} must be a (nested) list of numbers") from None
    if arr.ndim != ndim or arr.size == 0 or not np.isfinite(arr).all():
        raise ValueError(f"{name!r} must be a finite non-empty {ndim}-d list of numbers")
    return arr


def fit_domain(ctrl: np.ndarray, train_conditions: Sequence[str], control_label: str = "ctrl", *,
               calib_fraction: float = 0.5, max_components: int = 100, k: int = 5, max_reference: int = 1000,
               beta: float = 0.05, seed: int = 0) -> PerturbationDomain:
    """Fit the control-cell test on the training controls ``ctrl`` ``(n, G)`` (log1p) and store the rules' data.

    A seeded ``calib_fraction`` of the cells calibrates; the rest fit the PCA (``min(max_components, G, r-1)``
    directions) and the reference coreset. ``ValueError`` (from :class:`DomainScore`) when the calibration cells
    are too few for ``β`` (the median rule needs ``n_cal >= 2/β - 1``).
    """
    x = np.asarray(ctrl, dtype=np.float64)
    if x.ndim != 2 or len(x) < 4 or not np.isfinite(x).all():
        raise ValueError(f"training control cells must be a finite (n >= 4, G) array, got shape {x.shape}")
    n_cal = int(round(calib_fraction * len(x)))
    if 2 / (n_cal + 1) > beta:
        raise ValueError(f"{n_cal} calibration control cells cannot reach beta={beta} with the median rule "
                         f"(smallest batch p-value 2/(n_cal+1)); need at least {int(np.ceil(2 / beta)) - 1}")
    perm = np.random.default_rng(seed).permutation(len(x))
    cal, ref = x[np.sort(perm[:n_cal])], x[np.sort(perm[n_cal:])]
    mean = ref.mean(0)
    c = max(1, min(max_components, x.shape[1], len(ref) - 1))
    comp = np.linalg.svd(ref - mean, full_matrices=False)[2][:c]
    comp *= np.where(comp[np.arange(c), np.abs(comp).argmax(1)] < 0, -1.0, 1.0)[:, None]  # deterministic signs
    domain = PerturbationDomain(DomainScore(k=k, max_reference=max_reference, beta=beta), mean, comp,
                                [str(t) for t in train_conditions], control_label, int(seed), len(x))
    domain.score.fit(domain.project(ref), domain.project(cal), seed=seed)
    return PerturbationDomain.from_dict(domain.to_dict())  # the state a loaded artifact will have
