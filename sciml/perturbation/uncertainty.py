r"""Conformal bands on the predicted mean effect of a perturbation, simultaneous over genes.

For a condition ``c`` with predicted mean effect ``Δ̂_c`` and measured effect ``Δ_c`` (mean of its real cells
minus the mean of the control cells), both ``(G,)`` in log1p units, the sup-norm score (:class:`sciml.uq.SupNorm`)

.. math::  s_c = \max_g |Δ_{cg} − Δ̂_{cg}| / σ_g

is computed on the held-out *calibration conditions*; ``q`` is the split-conformal quantile
(:class:`sciml.uq.SplitConformal`, the ``⌈(n+1)(1−α)⌉``-th smallest score, ``+∞`` when ``n`` is too small) and the
band is the box ``Δ̂_{cg} ± q·σ_g`` (:class:`sciml.uq.Box`). It contains the whole effect vector of a new condition
exchangeable with the calibration conditions with probability ``≥ 1 − α`` (so every per-gene band covers at
least as often). ``σ_g`` is the per-gene root-mean-square residual on the validation conditions (shrunk towards
its mean over genes, floored), fixed before calibration so the guarantee holds.
"""

from __future__ import annotations

from torch import Tensor

from sciml.uq import Box, SplitConformal, SupNorm, calibrator_from_dict

SHRINK = 3.0  # pseudo-conditions of shrinkage of σ_g towards its mean over genes


def gene_scale(pred: Tensor, true: Tensor, shrink: float = SHRINK, floor: float = 1e-3) -> Tensor:
    """Per-gene residual scale ``σ_g = sqrt((n·m_g + k·m̄) / (n + k))``, ``(G,)`` float64, floored at ``floor``.

    ``m_g`` is the mean squared residual of gene ``g`` over the ``n`` conditions of ``pred``, ``true`` ``(n, G)``,
    ``m̄`` its mean over genes and ``k = shrink``.
    """
    r2 = (true.double() - pred.double()).pow(2)
    n = r2.shape[0]
    m = r2.mean(0)
    return ((n * m + shrink * m.mean()) / (n + shrink)).sqrt().clamp_min(floor)


class EffectBands:
    """Split-conformal sup-norm box on mean effects ``(C, G)``; state is JSON (:meth:`to_dict`)."""

    def __init__(self, score: SupNorm, calibrator: SplitConformal) -> None:
        self.score, self.calibrator = score, calibrator

    @classmethod
    def fit(cls, scale_pred: Tensor, scale_true: Tensor, cal_pred: Tensor, cal_true: Tensor,
            alpha: float = 0.1) -> EffectBands:
        """Per-gene scale from ``scale_*`` ``(n_fit, G)`` (validation conditions), quantile from ``cal_*``."""
        score = SupNorm(scale=gene_scale(scale_pred, scale_true))
        cal = SplitConformal(alpha=alpha).fit(score.score(cal_pred.double(), cal_true.double()))
        return cls(score, cal)

    @property
    def alpha(self) -> float:
        """Default miscoverage."""
        return self.calibrator.alpha

    def threshold(self, alpha: float | None = None) -> float:
        """Conformal quantile ``q`` of the scores (``inf`` when there are too few calibration conditions)."""
        return float(self.calibrator.threshold(alpha))

    def predict_set(self, effect: Tensor, alpha: float | None = None) -> Box:
        """Box ``Δ̂ ± q·σ`` for effects ``(C, G)``."""
        return self.score.predict_set(effect.double(), self.calibrator.threshold(alpha))

    def to_dict(self) -> dict:
        """JSON-serialisable state: ``{"method", "target", "score", "calibrator"}``."""
        return {"method": "supnorm_box", "target": "mean effect per condition (log1p)",
                "score": self.score.to_dict(), "calibrator": self.calibrator.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> EffectBands:
        """Rebuild from :meth:`to_dict` output; ``ValueError`` on a malformed dict."""
        if not isinstance(d, dict) or d.get("method") != "supnorm_box":
            raise ValueError("calibrator.json: expected method 'supnorm_box' (perturbation effect bands)")
        return cls(SupNorm.from_dict(d["score"]), calibrator_from_dict(d["calibrator"]))
