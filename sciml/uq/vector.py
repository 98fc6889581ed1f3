r"""Scores for vector and matrix targets: sup-norm (simultaneous box) and Mahalanobis (ellipsoid).

For vector targets (``docs/calibration.md``):

* sup-norm ``s = max_j |y_j - ŷ_j| / σ_j`` → :class:`~sciml.uq.sets.Box` ``∏_j [ŷ_j - qσ_j, ŷ_j + qσ_j]``, which
  covers all components *simultaneously* with probability ``>= 1 - α`` and is tighter than Bonferroni when
  the components correlate;
* Mahalanobis ``s = ‖Σ^{-1/2}(y - ŷ)‖₂`` → :class:`~sciml.uq.ellipsoid.Ellipsoid` with closed-form
  log-volume; ``Σ`` is estimated on a separate fit split (Johnstone & Cox 2021, "Conformal uncertainty sets
  for robust optimization", COPA; Messoudi, Destercke, Rousseau 2022, "Ellipsoidal conformal inference for
  multi-target regression", COPA).

Calibrate either with any calibrator that works on raw scores, e.g.
``q = SplitConformal(alpha=α).fit(score.score(pred, y)).threshold()`` then ``score.predict_set(pred_new, q)``.
Symmetric matrix targets (``symmetric=True``, shape ``(..., k, k)``, e.g. Hamiltonian blocks) are scored on
the upper triangle only (:func:`upper_triangle`); their sets live on that triangle, so test membership with
``set.contains(score.flatten(Y))``. These scores carry fitted state (buffers, :meth:`to_dict`), so they are
registered in :data:`VECTOR_SCORES`, not in the stateless :data:`~sciml.uq.scores.SCORES`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ._checks import finite_real, float_list
from .ellipsoid import Ellipsoid
from .scores import NormalizedResidual, Score, _as_threshold, _check_same_shape
from .sets import Box

__all__ = ["VECTOR_SCORES", "Mahalanobis", "SupNorm", "VectorScore", "upper_triangle", "vector_score_from_dict"]


def upper_triangle(a: Tensor) -> Tensor:
    """Entries ``a[..., i, j]`` with ``i <= j`` of ``(..., k, k)`` matrices, row-major, shape ``(..., k(k+1)/2)``."""
    if not isinstance(a, Tensor) or a.dim() < 2 or a.shape[-1] != a.shape[-2]:
        got = tuple(a.shape) if isinstance(a, Tensor) else type(a).__name__
        raise ValueError(f"symmetric targets must have shape (..., k, k), got {got}")
    i, j = torch.triu_indices(a.shape[-1], a.shape[-1], device=a.device)
    return a[..., i, j]


def _check_score_dict(d: object, keys: set[str], name: str) -> Mapping[str, Any]:
    if not isinstance(d, Mapping) or set(d) != keys:
        got = sorted(d, key=str) if isinstance(d, Mapping) else type(d).__name__
        raise ValueError(f"{name} score dict needs exactly the keys {sorted(keys)}, got {got}")
    if d["score"] != name or not isinstance(d["symmetric"], bool):
        raise ValueError(f"score must be {name!r} and symmetric a bool, got {d['score']!r}, {d['symmetric']!r}")
    return d


class VectorScore(Score, nn.Module):
    """Base of the vector scores: an ``nn.Module`` (fitted state in buffers) with the :class:`Score` API.

    Parameters
    ----------
    symmetric : bool
        Targets are symmetric ``(..., k, k)`` matrices scored on their upper triangle.

    """

    name: ClassVar[str]

    def __init__(self, symmetric: bool = False) -> None:
        super().__init__()
        if not isinstance(symmetric, bool):
            raise ValueError(f"symmetric must be a bool, got {symmetric!r}")
        self.symmetric = symmetric

    def flatten(self, y: Tensor) -> Tensor:
        """Targets as vectors: ``(..., d)`` unchanged, or the upper triangle of ``(..., k, k)`` if symmetric."""
        if self.symmetric:
            return upper_triangle(y)
        if not isinstance(y, Tensor) or y.dim() == 0:
            raise ValueError("vector targets must have shape (..., d)")
        return y

    def residuals(self, pred: Tensor, y: Tensor) -> Tensor:
        """Flattened residuals ``y - pred``, shape ``(..., d)``."""
        _check_same_shape(pred, y)
        return self.flatten(y - pred)


class SupNorm(VectorScore):
    """Sup-norm score ``s = max_j |y_j - ŷ_j| / σ_j``; set :class:`~sciml.uq.sets.Box` ``ŷ ± qσ``.

    ``σ_j = scale_j · sigma_j``: ``scale`` ``(d,)`` per-dimension (buffer, set by the constructor or by
    :meth:`fit` on a fit split; empty means 1) times an optional per-example ``sigma`` (same shape as ``pred``,
    > 0; default 1). With ``symmetric=True``, ``d = k(k+1)/2`` triangle entries. Log-volume of the box:
    ``Σ_j log(2qσ_j)``.
    """

    name: ClassVar[str] = "supnorm"

    def __init__(self, scale: Tensor | None = None, symmetric: bool = False) -> None:
        super().__init__(symmetric)
        self.register_buffer("scale", torch.empty(0, dtype=torch.float64))
        if scale is not None:
            self._set_scale(scale)

    def _set_scale(self, scale: Tensor) -> None:
        if not isinstance(scale, Tensor) or scale.dim() != 1 or not (torch.isfinite(scale) & (scale > 0)).all():
            raise ValueError("scale must be a 1-D tensor (d,) of finite values > 0")
        self.scale = scale.detach().to(device=self.scale.device, dtype=torch.float64)

    def _sigma(self, pred: Tensor, sigma: Tensor | None) -> Tensor:
        """Per-entry denominators ``σ``, shape of the flattened ``pred``."""
        flat = self.flatten(pred)
        s = torch.ones_like(flat) if sigma is None else self.flatten(NormalizedResidual._check_sigma(sigma, pred))
        if self.scale.numel():
            if self.scale.numel() != flat.shape[-1]:
                raise ValueError(f"scale has {self.scale.numel()} entries, targets have d={flat.shape[-1]}")
            s = s * self.scale.to(flat)
        return s

    def fit(self, pred: Tensor, y: Tensor, sigma: Tensor | None = None) -> SupNorm:
        """Set ``scale_j`` to the root-mean-square of ``(y_j - ŷ_j)/sigma_j`` over a fit split ``(n, ...)``."""
        self.scale = torch.empty(0, dtype=torch.float64, device=self.scale.device)
        r = self.residuals(pred, y) / self._sigma(pred, sigma)
        self._set_scale(r.reshape(-1, r.shape[-1]).double().pow(2).mean(0).sqrt())
        return self

    def score(self, pred: Tensor, y: Tensor, sigma: Tensor | None = None) -> Tensor:
        """``max_j |r_j| / σ_j``, shape ``pred.shape[:-1]`` (``pred.shape[:-2]`` if symmetric)."""
        return (self.residuals(pred, y).abs() / self._sigma(pred, sigma)).amax(-1)

    def predict_set(self, pred: Tensor, q: Tensor | float, sigma: Tensor | None = None) -> Box:
        """``Box(ŷ - qσ, ŷ + qσ)``; ``q >= 0`` is 0-dim or one per example (``+inf``: unbounded)."""
        flat = self.flatten(pred)
        q = _as_threshold(q, flat)
        half = (q.unsqueeze(-1) if q.dim() else q) * self._sigma(pred, sigma)
        return Box(flat - half, flat + half)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable ``{"score", "symmetric", "scale"}`` (``scale`` is ``None`` when unset)."""
        scale = [float(s) for s in self.scale.tolist()] if self.scale.numel() else None
        return {"score": self.name, "symmetric": self.symmetric, "scale": scale}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SupNorm:
        """Rebuild from :meth:`to_dict` output; ``ValueError`` on any malformed field."""
        _check_score_dict(d, {"score", "symmetric", "scale"}, cls.name)
        scale = None if d["scale"] is None else torch.tensor(float_list(d["scale"], "scale"), dtype=torch.float64)
        return cls(scale=scale, symmetric=d["symmetric"])

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        incoming = state_dict.get(prefix + "scale")
        if isinstance(incoming, Tensor):
            if incoming.dim() != 1 or not (torch.isfinite(incoming) & (incoming > 0)).all():
                args[-1].append(f"{prefix}scale must be a 1-D tensor of finite values > 0")  # args[-1]: error_msgs
                return
            self.scale = torch.empty_like(incoming, device=self.scale.device)
        super()._load_from_state_dict(state_dict, prefix, *args)


class Mahalanobis(VectorScore):
    r"""Mahalanobis score ``s = ‖L⁻¹(y - ŷ)‖₂`` with ``Σ = L Lᵀ``; set :class:`~sciml.uq.ellipsoid.Ellipsoid`.

    :meth:`fit` estimates, on a fit split disjoint from the calibration split,

    .. math::  \hat\Sigma = \frac1n \sum_i r_i r_i^\top + \lambda \frac{\operatorname{tr}\hat\Sigma_0}{d} I,

    the second-moment matrix of the residuals ``r_i = y_i - ŷ_i`` about 0 (the set is centred at ``ŷ``, so a
    systematic bias widens it along the bias instead of being ignored) plus a ridge relative to the mean
    variance, which keeps ``Σ̂`` positive definite when ``n < d`` or components are collinear. Any fixed
    ``Σ`` gives valid coverage after conformal calibration; a good one gives small volume.

    Parameters
    ----------
    ridge : float
        Relative ridge ``λ >= 0``.
    symmetric : bool
        Score the upper triangle of symmetric ``(..., k, k)`` targets.

    Notes
    -----
    Buffer ``cov`` ``(d, d)`` float64 holds the regularised ``Σ̂`` (empty before :meth:`fit`).

    """

    name: ClassVar[str] = "mahalanobis"

    def __init__(self, ridge: float = 1e-3, symmetric: bool = False) -> None:
        super().__init__(symmetric)
        self.ridge = finite_real(ridge, "ridge")
        if self.ridge < 0:
            raise ValueError(f"'ridge' must be >= 0, got {ridge!r}")
        self.register_buffer("cov", torch.empty(0, 0, dtype=torch.float64))

    @staticmethod
    def _cholesky(cov: Tensor) -> Tensor:
        """Cholesky factor of ``cov``; ``ValueError`` unless it is a finite symmetric positive definite matrix."""
        if cov.dim() != 2 or cov.shape[0] != cov.shape[1] or cov.numel() == 0 or not torch.isfinite(cov).all():
            raise ValueError(f"cov must be a finite (d, d) matrix, got shape {tuple(cov.shape)}")
        if not torch.allclose(cov, cov.T, rtol=1e-10, atol=0.0):
            raise ValueError("cov must be symmetric")
        chol, info = torch.linalg.cholesky_ex(cov)
        if int(info) != 0:
            raise ValueError("cov must be positive definite")
        return chol

    def fit(self, pred: Tensor, y: Tensor) -> Mahalanobis:
        """Estimate ``Σ̂`` (formula above) from fit-split predictions and targets, ``(n, d)`` or ``(n, k, k)``."""
        r = self.residuals(pred, y)
        r = r.reshape(-1, r.shape[-1]).detach().double()
        if r.shape[0] == 0 or not torch.isfinite(r).all():
            raise ValueError("Mahalanobis.fit needs at least one finite residual vector")
        cov = r.T @ r / r.shape[0]
        cov = (cov + cov.T) / 2
        mean_var = cov.diagonal().mean()
        if not mean_var > 0:
            raise ValueError("residuals are all zero; the covariance cannot be estimated")
        cov = cov + self.ridge * mean_var * torch.eye(cov.shape[0], dtype=cov.dtype, device=cov.device)
        self._cholesky(cov)
        self.cov = cov.to(self.cov.device)
        return self

    @property
    def chol(self) -> Tensor:
        """Cholesky factor ``L`` of the fitted ``Σ̂``, ``(d, d)`` float64; ``RuntimeError`` before :meth:`fit`."""
        self._require_fit()
        return self._cholesky(self.cov)

    def _require_fit(self) -> None:
        if self.cov.numel() == 0:
            raise RuntimeError("Mahalanobis is not fitted; call fit(pred, y) on a fit split first")

    def predict_set(self, pred: Tensor, q: Tensor | float, sigma: Tensor | None = None) -> Ellipsoid:
        """``Ellipsoid(ŷ, L, q)``; ``q >= 0`` is 0-dim or one per example. ``sigma`` is unused."""
        flat = self.flatten(pred)
        return Ellipsoid(flat, self.chol.to(flat), _as_threshold(q, flat))

    def score(self, pred: Tensor, y: Tensor, sigma: Tensor | None = None) -> Tensor:
        """``‖L⁻¹(y - ŷ)‖₂``, shape of the examples; the same computation as ``Ellipsoid.contains``."""
        _check_same_shape(pred, y)
        return self.predict_set(pred, 0.0).whitened_norm(self.flatten(y))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable ``{"score", "symmetric", "ridge", "cov"}``; ``RuntimeError`` before :meth:`fit`."""
        self._require_fit()
        cov = [[float(v) for v in row] for row in self.cov.tolist()]
        return {"score": self.name, "symmetric": self.symmetric, "ridge": self.ridge, "cov": cov}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Mahalanobis:
        """Rebuild from :meth:`to_dict` output; ``ValueError`` unless ``cov`` is a finite SPD matrix."""
        _check_score_dict(d, {"score", "symmetric", "ridge", "cov"}, cls.name)
        rows = d["cov"]
        if not isinstance(rows, list | tuple) or not rows:
            raise ValueError("'cov' must be a non-empty list of rows")
        cov = torch.tensor([float_list(row, "cov") for row in rows], dtype=torch.float64)
        cls._cholesky(cov)
        new = cls(ridge=d["ridge"], symmetric=d["symmetric"])
        new.cov = cov
        return new

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        incoming = state_dict.get(prefix + "cov")
        if isinstance(incoming, Tensor) and incoming.numel():
            try:
                self._cholesky(incoming.double())
            except ValueError as err:
                args[-1].append(f"{prefix}cov: {err}")  # args[-1]: error_msgs
                return
        if isinstance(incoming, Tensor):
            self.cov = torch.empty_like(incoming, device=self.cov.device)
        super()._load_from_state_dict(state_dict, prefix, *args)


VECTOR_SCORES: dict[str, type[VectorScore]] = {cls.name: cls for cls in (SupNorm, Mahalanobis)}


def vector_score_from_dict(d: Mapping[str, Any]) -> VectorScore:
    """Rebuild a score of :data:`VECTOR_SCORES` from its ``to_dict`` output, dispatching on ``d["score"]``."""
    name = d.get("score") if isinstance(d, Mapping) else None
    if not isinstance(name, str) or name not in VECTOR_SCORES:
        raise ValueError(f"unknown vector score {name!r}; known: {sorted(VECTOR_SCORES)}")
    return VECTOR_SCORES[name].from_dict(d)
