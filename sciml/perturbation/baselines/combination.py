"""Learned-combination baseline: a per-gene rule Δ_ab,g = f(Δ_a,g, Δ_b,g, μ_0,g) fitted on the training doubles.

A stronger bar than :class:`~sciml.perturbation.baselines.simple.Additive` when doubles interact through saturation or
masking (the simulator's AND terms): one gradient-boosted regressor (scikit-learn
``HistGradientBoostingRegressor``) shared by all genes, on the features (Δ_a, Δ_b, μ_0, Δ_a + Δ_b, min, max) of
each gene, target the gene's measured Δ_ab.
Singles, doubles with an unseen single, and data without training doubles fall back to the additive prediction.
"""

from __future__ import annotations

import numpy as np

from sciml.perturbation.baselines.simple import Additive
from sciml.perturbation.data.conditions import format_condition
from sciml.perturbation.data.table import make_key, split_key


class LearnedCombination(Additive):
    """Per-gene combination rule for doubles learned from the training doubles (fallback: additive)."""

    name = "combination"

    def __init__(self, max_iter: int = 200, seed: int = 0) -> None:
        self.max_iter, self.seed = max_iter, seed

    def _features(self, condition: str) -> np.ndarray | None:
        genes = self.dm.perturbation(condition)
        cell_type = split_key(self.dm.key(condition))[1]
        singles = [self._single_or_none(g, cell_type) for g in genes]
        if len(genes) != 2 or any(s is None for s in singles):
            return None
        da, db = singles
        return np.stack([da, db, self._ctrl(condition), da + db, np.minimum(da, db), np.maximum(da, db)], axis=1)

    def _single_or_none(self, gene: str, cell_type: str) -> np.ndarray | None:
        return self.train_delta.get(make_key(format_condition([gene]), cell_type))

    def _fit(self) -> None:
        from sklearn.ensemble import HistGradientBoostingRegressor

        super()._fit()
        rows = [(f, self.train_delta[c]) for c in self.train_delta if (f := self._features(c)) is not None]
        self.model = None
        if rows:
            x = np.concatenate([f for f, _ in rows])
            y = np.concatenate([d for _, d in rows])
            self.model = HistGradientBoostingRegressor(max_iter=self.max_iter, random_state=self.seed).fit(x, y)

    def delta(self, condition: str) -> np.ndarray:
        feats = self._features(condition) if self.model is not None else None
        return super().delta(condition) if feats is None else self.model.predict(feats)
