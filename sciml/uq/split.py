"""Split (inductive) conformal calibration and the registry of calibrators.

Given ``n`` calibration scores ``s_i = s(x_i, y_i)`` the threshold is ``q = Q_{1-α}(S ∪ {∞})``, the
``⌈(n+1)(1-α)⌉``-th smallest score (see :func:`sciml.uq.quantile.conformal_quantile`), and the prediction set
is ``{y : s(x, y) <= q}``. For exchangeable continuous scores the coverage given the calibration set is
``Beta(k, n+1-k)`` with mean ``k/(n+1) >= 1-α`` (Vovk, Gammerman, Shafer 2005; ``docs/calibration.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ._checks import check_calibrator_dict, check_scores, float_list, prepare_state_load, sort_scores
from .quantile import check_alpha, conformal_quantile, conformal_rank
from .scores import get_score
from .sets import Interval

__all__ = ["CALIBRATORS", "SplitConformal", "calibrator_from_dict"]


class SplitConformal(nn.Module):
    """Split conformal calibrator; sorted calibration scores live in the buffer ``scores``, shape ``(n,)``.

    Parameters
    ----------
    score : str
        Name of a score in :data:`sciml.uq.scores.SCORES` (``"absolute"`` or ``"normalized"``).
    alpha : float
        Default miscoverage in ``(0, 1)``; the sets cover with probability ``>= 1 - alpha``.

    Notes
    -----
    ``score`` and ``alpha`` are configuration (kept in :meth:`to_dict`); only the scores travel in
    ``state_dict``, which can be loaded into an instance fitted on any number of scores (or none).

    """

    method = "split"

    def __init__(self, score: str = "absolute", alpha: float = 0.1) -> None:
        super().__init__()
        self.score_fn = get_score(score)
        self.score_name = score
        self.alpha = check_alpha(alpha)
        self.register_buffer("scores", torch.empty(0))
        self._sorted = False  # True once fit() sorted the buffer; threshold() then indexes it directly

    @property
    def n_calib(self) -> int:
        """Number of calibration scores ``n`` (0 before :meth:`fit`)."""
        return self.scores.numel()

    def fit(self, scores: Tensor) -> SplitConformal:
        """Store the calibration scores, shape ``(n,)``, finite, sorted ascending; returns ``self``."""
        check_scores(scores)
        self.scores = sort_scores(scores).to(self.scores.device)
        self._sorted = True
        return self

    def fit_predictions(self, pred: Tensor, y: Tensor, sigma: Tensor | None = None) -> SplitConformal:
        """Score calibration predictions ``pred``, targets ``y`` (and ``sigma``), all ``(n,)``, then fit."""
        return self.fit(self.score_fn.score(pred, y, sigma))

    def threshold(self, alpha: float | None = None) -> Tensor:
        """Conformal threshold ``q`` (0-dim), ``+inf`` when ``⌈(n+1)(1-alpha)⌉ > n``."""
        if self.n_calib == 0:
            raise RuntimeError("SplitConformal is not fitted; call fit(scores) or fit_predictions first")
        k = conformal_rank(self.n_calib, self.alpha if alpha is None else alpha)
        # the buffer is sorted (fit, from_dict); a state_dict load may not be: fall back to the sorting helper
        if k <= self.n_calib and self._sorted:
            return self.scores[k - 1].clone()
        return conformal_quantile(self.scores, self.alpha if alpha is None else alpha)

    def predict_set(self, pred: Tensor, sigma: Tensor | None = None, alpha: float | None = None) -> Interval:
        """Prediction interval ``{y : s(pred, y, sigma) <= q}`` for ``pred`` of shape ``(m,)``."""
        return self.score_fn.interval(pred, self.threshold(alpha), sigma)

    def forward(self, pred: Tensor, sigma: Tensor | None = None, alpha: float | None = None) -> Interval:
        """Alias of :meth:`predict_set`."""
        return self.predict_set(pred, sigma, alpha)

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        if prepare_state_load(self, state_dict, prefix, ("scores",), args[-1]):  # args[-1]: error_msgs
            super()._load_from_state_dict(state_dict, prefix, *args)
            self._sorted = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable ``{"method", "score", "alpha", "scores"}`` (scores as Python floats)."""
        if self.n_calib == 0:
            raise RuntimeError("SplitConformal is not fitted; call fit(scores) before to_dict")
        return {
            "method": self.method,
            "score": self.score_name,
            "alpha": self.alpha,
            "scores": [float(s) for s in self.scores.tolist()],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SplitConformal:
        """Rebuild from :meth:`to_dict` output; scores are loaded as float64 (lossless)."""
        check_calibrator_dict(d, {"method", "score", "alpha", "scores"}, cls.method)
        raw = float_list(d["scores"], "scores")
        return cls(score=d["score"], alpha=d["alpha"]).fit(torch.tensor(raw, dtype=torch.float64))


CALIBRATORS: dict[str, type[nn.Module]] = {"split": SplitConformal}


def calibrator_from_dict(d: Mapping[str, Any]) -> nn.Module:
    """Rebuild any registered calibrator from its ``to_dict`` output, dispatching on ``d["method"]``."""
    if not isinstance(d, Mapping) or "method" not in d:
        raise ValueError("calibrator dict must be a mapping with a 'method' key")
    method = d["method"]
    if not isinstance(method, str) or method not in CALIBRATORS:
        raise ValueError(f"unknown calibration method {method!r}; known methods: {sorted(CALIBRATORS)}")
    return CALIBRATORS[method].from_dict(d)
