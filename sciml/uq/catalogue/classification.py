r"""Classification nonconformity scores LAC, APS and RAPS; their sets are :class:`~sciml.uq.sets.LabelSet`.

``pred`` is a tensor of class probabilities ``p̂(·|x)`` of shape ``(..., K)`` (rows sum to 1; APS/RAPS
renormalise them), labels ``y`` are integers of shape ``(...)``. Each score computes ``s(x, c)`` for every
candidate label ``c`` at once (:meth:`ClassificationScore.all_scores`); the conformal set is
``{c : s(x, c) <= q}`` with ``q`` from :func:`sciml.uq.quantile.conformal_quantile` of calibration scores.

References: [1] Sadinle, Lei, Wasserman (2019), "Least ambiguous set-valued classifiers", JASA.
[2] Romano, Sesia, Candès (2020), "Classification with valid and adaptive coverage", NeurIPS.
[3] Angelopoulos, Bates, Malik, Jordan (2021), "Uncertainty sets for image classifiers using conformal
prediction", ICLR (RAPS, Algorithms 1-2).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar

import torch
from torch import Tensor

from .._checks import finite_real, is_int
from ..scores import Score
from ..sets import LabelSet, check_labels

__all__ = ["APS", "CLASSIFICATION_SCORES", "LAC", "RAPS", "ClassificationScore"]


def _check_probs(probs: Tensor) -> None:
    if not isinstance(probs, Tensor) or not probs.is_floating_point() or probs.dim() == 0:
        raise ValueError("class probabilities must be a floating tensor of shape (..., K)")
    if not (torch.isfinite(probs) & (probs >= 0)).all():
        raise ValueError("class probabilities must be finite and >= 0")


class ClassificationScore(Score):
    """Score of every candidate label; subclasses implement :meth:`all_scores` only.

    ``sigma`` is accepted for the shared :class:`~sciml.uq.scores.Score` signature and ignored;
    ``generator`` seeds the randomisation of APS/RAPS (unused by LAC).
    """

    @abstractmethod
    def all_scores(self, probs: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Scores ``s(x, c)`` for all labels, shape ``(..., K)``."""

    def score(
        self, pred: Tensor, y: Tensor, sigma: Tensor | None = None, generator: torch.Generator | None = None
    ) -> Tensor:
        """Score of the true label, ``s(x, y)``, shape ``pred.shape[:-1]``."""
        _check_probs(pred)
        check_labels(y, pred.shape[:-1], pred.shape[-1])
        return self.all_scores(pred, generator).gather(-1, y.long().unsqueeze(-1)).squeeze(-1)

    def predict_set(
        self,
        pred: Tensor,
        q: Tensor | float,
        sigma: Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> LabelSet:
        """``LabelSet({c : s(x, c) <= q})``; ``q`` is 0-dim or broadcastable to ``pred.shape[:-1]``."""
        _check_probs(pred)
        q = torch.as_tensor(q, dtype=pred.dtype, device=pred.device)
        if torch.isnan(q).any():
            raise ValueError("threshold q must not be NaN")
        return LabelSet(self.all_scores(pred, generator) <= q.unsqueeze(-1))


class LAC(ClassificationScore):
    """Least ambiguous set-valued classifier [1]: ``s(x, c) = 1 - p̂(c|x)``."""

    name: ClassVar[str] = "lac"

    def all_scores(self, probs: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """``1 - probs``, shape ``(..., K)``."""
        _check_probs(probs)
        return 1 - probs


class APS(ClassificationScore):
    r"""Adaptive prediction sets [2]: mass of the labels ranked above ``c`` plus ``u`` times ``p̂(c|x)``.

    .. math::  s(x, c, u) = \sum_{j < o(c)} p̂_{(j)} + u\, p̂_{(o(c))} + \lambda\,(o(c) - k_{reg})^+

    where ``o(c)`` is the 1-based rank of ``c`` by decreasing probability (ties broken by label index) and the
    penalty is zero for APS (see :class:`RAPS`). Randomised: one ``u ~ U(0, 1)`` per example (drawn from
    ``generator``), continuous scores and coverage ``k/(n+1)`` exactly; sets may be empty. Non-randomised:
    ``u = 1``, the cumulative mass including ``c`` (the least likely label scores exactly 1), coverage
    ``>= k/(n+1)``.

    Parameters
    ----------
    randomized : bool
        Draw ``u ~ U(0, 1)`` (default) or use ``u = 1``.

    """

    name: ClassVar[str] = "aps"

    def __init__(self, randomized: bool = True) -> None:
        if not isinstance(randomized, bool):
            raise ValueError(f"randomized must be a bool, got {randomized!r}")
        self.randomized = randomized
        self.lam, self.k_reg = 0.0, 0

    def all_scores(self, probs: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Scores of all labels, shape ``(..., K)``, in the dtype of ``probs``."""
        _check_probs(probs)
        sorted_p, order = probs.sort(dim=-1, descending=True, stable=True)
        cum = sorted_p.cumsum(-1)
        total = cum[..., -1:]
        if not (total > 0).all():
            raise ValueError("class probabilities must not be all zero")
        cum, sorted_p = cum / total, sorted_p / total  # cum[..., -1] == 1 exactly
        if self.randomized:
            u = torch.rand(
                probs.shape[:-1] + (1,), generator=generator, dtype=probs.dtype, device=probs.device
            )
            cum = cum - (1 - u) * sorted_p
        if self.lam > 0:
            rank = torch.arange(1, probs.shape[-1] + 1, dtype=probs.dtype, device=probs.device)
            cum = cum + self.lam * (rank - self.k_reg).clamp_min(0)
        return torch.empty_like(cum).scatter_(-1, order, cum)


class RAPS(APS):
    r"""Regularised APS [3]: APS plus the rank penalty ``λ (o(c) - k_reg)^+`` that discourages large sets.

    Parameters
    ----------
    randomized : bool
        As in :class:`APS`.
    lam : float
        Penalty weight ``λ >= 0`` (``lambda`` in [3]).
    k_reg : int
        Number of top labels without penalty, ``>= 0``.

    """

    name: ClassVar[str] = "raps"

    def __init__(self, randomized: bool = True, lam: float = 0.01, k_reg: int = 5) -> None:
        super().__init__(randomized)
        lam = finite_real(lam, "lam")
        if lam < 0:
            raise ValueError(f"'lam' must be >= 0, got {lam}")
        if not is_int(k_reg) or k_reg < 0:
            raise ValueError(f"'k_reg' must be a non-negative integer, got {k_reg!r}")
        self.lam, self.k_reg = lam, int(k_reg)


CLASSIFICATION_SCORES: dict[str, type[ClassificationScore]] = {cls.name: cls for cls in (LAC, APS, RAPS)}
