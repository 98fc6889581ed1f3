"""Baselines every perturbation benchmark shows (same data module, same metrics).

All work on mean effects Δ_c = mean(cells of c) − mean(control cells of c's cell type), in log1p space:

- :class:`NoChange`: Δ = 0 (predict the control mean);
- :class:`TrainMean`: Δ = mean of the training conditions' Δ;
- :class:`Additive`: Δ_{a+b} = Δ_a + Δ_b from the training singles (a single measured only in other cell types:
  the mean of its effects there; an unseen single falls back to the training mean, so the baseline stays defined on
  every split);
- :class:`Linear`: Y ≈ G K Pᵀ (Ahlmann-Eltze, Huber & Anders, Nat. Methods 2025): Y (genes × conditions) the
  training Δ centred by their row mean b, G the top-``dim`` principal gene embeddings of Y, P the condition
  embeddings (sum of the rows of G of the perturbed genes; 0 for an unmeasured gene),
  K = (GᵀG + λI)⁻¹ Gᵀ Y P (PᵀP + λI)⁻¹; prediction Δ = b + G K p.

``sample(condition, ctrl_cells)`` shifts real control cells by the predicted Δ (no clipping, so the sample mean is
exactly the predicted mean), which makes distribution metrics apply to every baseline.
"""

from __future__ import annotations

import numpy as np

from sciml.perturbation.data.conditions import format_condition
from sciml.perturbation.data.table import make_key, split_key


def by_single_gene(dm, keys, value) -> dict[str, list]:
    """``{gene: [value(key) of each single-gene key among keys]}`` (one key per cell type the gene was measured in)."""
    out: dict[str, list] = {}
    for key in keys:
        genes = dm.perturbation(key)
        if len(genes) == 1:
            out.setdefault(genes[0], []).append(value(key))
    return out


class Baseline:
    """Template: ``fit`` stores control means and training effects; subclasses define :meth:`delta`."""

    name = "baseline"

    def fit(self, dm) -> Baseline:
        """Read the training conditions of a set-up data module (``PerturbationDataModule``)."""
        self.dm = dm
        self.ctrl_mean = {}
        self.train_delta = {c: dm.cells(c).mean(axis=0) - self._ctrl(c) for c in dm.conditions["train"]}
        self.mean_delta = np.mean(list(self.train_delta.values()), axis=0)
        self._fit()
        return self

    def _fit(self) -> None:
        """Subclass hook, after :meth:`fit` stored ``train_delta`` and ``mean_delta``."""

    def _ctrl(self, condition: str) -> np.ndarray:
        cell_type = split_key(self.dm.key(condition))[1]
        if cell_type not in self.ctrl_mean:
            self.ctrl_mean[cell_type] = self.dm.control_matrix(condition).mean(axis=0)
        return self.ctrl_mean[cell_type]

    def delta(self, condition: str) -> np.ndarray:
        """Predicted mean effect (G,) of a condition."""
        raise NotImplementedError

    def predict_mean(self, condition: str) -> np.ndarray:
        """Predicted mean expression (G,) = control mean + Δ."""
        return (self._ctrl(condition) + self.delta(condition)).astype(np.float32)

    def sample(self, condition: str, ctrl_cells: np.ndarray) -> np.ndarray:
        """Control cells (n, G) shifted by the predicted Δ: a predicted cell population (n, G)."""
        return (np.asarray(ctrl_cells) + self.delta(condition)).astype(np.float32)


class NoChange(Baseline):
    """Predict the control population."""

    name = "no_change"

    def delta(self, condition: str) -> np.ndarray:
        return np.zeros_like(self.mean_delta)


class TrainMean(Baseline):
    """Predict the average training effect for every condition."""

    name = "train_mean"

    def delta(self, condition: str) -> np.ndarray:
        return self.mean_delta


class Additive(Baseline):
    """Sum of the training singles' effects (Norman et al. 2019; the bar in Ahlmann-Eltze et al. 2025)."""

    name = "additive"

    def _fit(self) -> None:
        per_gene = by_single_gene(self.dm, self.train_delta, self.train_delta.__getitem__)
        self.gene_delta = {g: np.mean(d, axis=0) for g, d in per_gene.items()}  # mean over cell types

    def _single(self, gene: str, cell_type: str) -> np.ndarray:
        key = make_key(format_condition([gene]), cell_type)
        return self.train_delta[key] if key in self.train_delta else self.gene_delta.get(gene, self.mean_delta)

    def delta(self, condition: str) -> np.ndarray:
        cell_type = split_key(self.dm.key(condition))[1]
        genes = self.dm.perturbation(condition)
        return np.sum([self._single(g, cell_type) for g in genes], axis=0) if genes else 0 * self.mean_delta


class Linear(Baseline):
    """Linear gene-embedding model Y ≈ G K Pᵀ with ridge closed form (``dim`` = 10, λ = 0.1)."""

    name = "linear"

    def __init__(self, dim: int = 10, ridge: float = 0.1) -> None:
        self.dim, self.ridge = dim, ridge

    def _fit(self) -> None:
        keys = sorted(self.train_delta)
        y = np.stack([self.train_delta[k] for k in keys], axis=1).astype(np.float64)  # (G, n)
        self.b = y.mean(axis=1)
        yc = y - self.b[:, None]
        u, s, _ = np.linalg.svd(yc, full_matrices=False)
        d = min(self.dim, len(s))
        self.g = u[:, :d] * s[:d]  # (G, d) gene embedding: principal components of the training effects
        p = np.stack([self._embed(k) for k in keys])  # (n, d)
        eye = np.eye(d) * self.ridge
        left = np.linalg.solve(self.g.T @ self.g + eye, self.g.T @ yc @ p)
        self.k = np.linalg.solve((p.T @ p + eye).T, left.T).T  # (d, d)

    def _embed(self, condition: str) -> np.ndarray:
        index = {g: i for i, g in enumerate(self.dm.genes)}
        rows = [self.g[index[g]] for g in self.dm.perturbation(condition) if g in index]
        return np.sum(rows, axis=0) if rows else np.zeros(self.g.shape[1])

    def delta(self, condition: str) -> np.ndarray:
        return self.b + self.g @ self.k @ self._embed(condition)


BASELINES = {cls.name: cls for cls in (NoChange, TrainMean, Additive, Linear)}  # closed-form, fast
TRAINED = {"perturbed_vae": "sciml.perturbation.baselines.perturbed_vae:PerturbedVAE",  # gradient descent (~10 s)
           "combination": "sciml.perturbation.baselines.combination:LearnedCombination"}  # boosted per-gene rule (~1 s)


def get_baseline(name: str, **kwargs) -> Baseline:
    """An unfitted baseline by name (:data:`BASELINES` or :data:`TRAINED`)."""
    if name in BASELINES:
        return BASELINES[name](**kwargs)
    if name in TRAINED:
        import importlib

        module, cls = TRAINED[name].split(":")
        return getattr(importlib.import_module(module), cls)(**kwargs)
    raise ValueError(f"baseline {name!r} unknown; choose from {sorted(BASELINES) + sorted(TRAINED)}")


def fit_baselines(dm, names: tuple[str, ...] = tuple(BASELINES)) -> dict[str, Baseline]:
    """Fit the named baselines on ``dm``'s training conditions."""
    return {name: get_baseline(name).fit(dm) for name in names}
