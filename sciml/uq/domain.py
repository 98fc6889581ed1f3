r"""Applicability domain: a conformal novelty test on a model's learned representation.

Given embeddings ``z(x) ∈ R^d`` (any layer of any model), the nonconformity score of an input is its mean
Euclidean distance to the ``k`` nearest points of a *reference coreset* of training embeddings, in features
standardised with the training mean and standard deviation:

.. math::  s(x) = \frac{1}{k\sqrt{d}} \sum_{j=1}^{k} \big\| (z(x) - μ)/σ - r_{(j)}(x) \big\|_2 ,

with ``r_{(j)}(x)`` the ``j``-th nearest standardised reference point. Held-out in-distribution calibration
inputs give scores ``s_1..s_n``; the conformal p-value of a new input is

.. math::  p(x) = \frac{1 + \#\{i : s_i \ge s(x)\}}{n + 1},

and ``x`` is flagged out of domain when ``p(x) <= β`` (default 0.05). Because the calibration inputs are not
in the reference set, their scores and the score of a new exchangeable input are exchangeable, so
``P(p(x) <= u) <= u`` for every ``u`` and an in-distribution input is flagged with probability at most ``β``
(Laxhammar & Falkman 2015; Bates, Candès, Lei, Romano, Sesia 2023, "Testing for outliers with conformal
p-values"). The guarantee is marginal over the calibration draw; given one calibration set the flag rate is
``Beta(k_β, n + 1 - k_β)``-distributed with ``k_β = ⌊β(n + 1)⌋``. With ``n`` calibration points the smallest
possible p-value is ``1/(n + 1)``, so ``β < 1/(n + 1)`` could never flag anything and is refused.

Choices (and why):

* **k-NN distance, not a latent Mahalanobis score.** Learned representations of crystals, molecules and cells
  are multi-modal (chemistries, conformer families, perturbation programmes); a single Gaussian puts
  in-distribution gaps between modes inside its ellipsoid, the k-NN distance does not (Sun, Ming, Zhu, Li 2022,
  "Out-of-distribution detection with deep nearest neighbors"). ``k`` (default 5) averages out single noisy
  neighbours. Any score keeps the guarantee; the choice only affects power.
* **Per-feature standardisation, not full whitening.** Without it, distances are dominated by high-variance
  features; full whitening would divide by near-zero eigenvalues of a rank-deficient embedding covariance and
  turn numerical noise into distance. Scales are floored at ``1e-3`` times the mean scale.
* **Seeded uniform random coreset** of at most ``max_reference`` training points (default 2,000). It is
  density-preserving (distances keep meaning "how typical") where farthest-point sampling would promote
  training outliers to centres; Sun et al. (2022) found a 1 % random subset keeps k-NN OOD performance; and it
  costs nothing, where a greedy k-centre pass is ``O(n · max_reference · d)``. Standardisation statistics use
  all training embeddings. The artifact state is bounded by ``max_reference · d + 2d + n_cal`` floats.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ._checks import check_calibrator_dict, float_list, is_int, resize_buffers, sort_scores
from .quantile import check_alpha, conformal_pvalues

__all__ = ["DomainScore", "check_embeddings", "knn_distance"]

FORMAT_VERSION = 1
_SCALE_FLOOR = 1e-3  # relative to the mean training scale
_CHUNK = 1024  # query rows per distance block: memory ~ _CHUNK * n_reference floats


def check_embeddings(emb: Tensor, name: str, dim: int | None = None) -> Tensor:
    """Return ``emb`` detached as float64; ``ValueError`` unless it is a finite floating ``(n, d)`` tensor.

    ``dim``, when given, is the ``d`` the embeddings must have (the one a score was fitted on).
    """
    if not isinstance(emb, Tensor) or emb.dim() != 2 or not emb.is_floating_point():
        got = f"{emb.dtype} {tuple(emb.shape)}" if isinstance(emb, Tensor) else type(emb).__name__
        raise ValueError(f"{name} must be a floating tensor of shape (n, d), got {got}")
    if dim is not None and emb.shape[1] != dim:
        raise ValueError(f"{name} has dimension d={emb.shape[1]}, the fitted embeddings have d={dim}")
    if not torch.isfinite(emb).all():
        raise ValueError(f"{name} contains NaN or inf; embeddings must be finite")
    return emb.detach().to(torch.float64)


def knn_distance(query: Tensor, reference: Tensor, k: int) -> Tensor:
    """Mean Euclidean distance of each query row to its ``k`` nearest reference rows, divided by ``sqrt(d)``.

    Parameters
    ----------
    query : torch.Tensor
        Shape ``(m, d)``, float64.
    reference : torch.Tensor
        Shape ``(r, d)``, float64, ``r >= k``.
    k : int
        Number of neighbours.

    Returns
    -------
    torch.Tensor
        Shape ``(m,)``. Computed in blocks of rows from explicit differences (no matrix-multiply shortcut,
        which cancels badly), so a row's value does not depend on the other rows in the batch.

    """
    out = [query.new_empty(0)]
    for start in range(0, query.shape[0], _CHUNK):
        dist = torch.cdist(query[start : start + _CHUNK], reference, compute_mode="donot_use_mm_for_euclid_dist")
        out.append(dist.topk(k, dim=1, largest=False).values.mean(1))
    return torch.cat(out) / math.sqrt(query.shape[1])


def _check_beta_feasible(beta: float, n_cal: int) -> None:
    if (n_cal + 1) * Fraction(repr(beta)) < 1:
        raise ValueError(
            f"beta={beta} is below the smallest possible p-value 1/(n_cal+1) = 1/{n_cal + 1}: nothing could ever be "
            f"flagged; use at least {math.ceil(1 / beta) - 1} calibration points or a larger beta"
        )


class DomainScore(nn.Module):
    """k-NN conformal novelty test on embeddings (module docstring).

    Buffers: ``mean``, ``scale`` ``(d,)`` (training standardisation), ``reference`` ``(r, d)`` (standardised
    coreset, ``r <= max_reference``), ``cal_scores`` ``(n_cal,)`` sorted ascending, ``train_size`` (0-dim).

    Parameters
    ----------
    k : int
        Number of nearest reference points averaged in the score.
    max_reference : int
        Largest coreset size ``r``.
    beta : float
        Default level in ``(0, 1)``: an in-distribution input is flagged with probability ``<= beta``.

    """

    method = "knn_conformal"

    def __init__(self, k: int = 5, max_reference: int = 2000, beta: float = 0.05) -> None:
        super().__init__()
        if not is_int(k) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        if not is_int(max_reference) or max_reference < k:
            raise ValueError(f"max_reference must be an integer >= k={k}, got {max_reference!r}")
        self.k, self.max_reference, self.beta = int(k), int(max_reference), check_alpha(beta)
        self.register_buffer("train_size", torch.zeros((), dtype=torch.int64))
        for name, shape in (("mean", (0,)), ("scale", (0,)), ("reference", (0, 0)), ("cal_scores", (0,))):
            self.register_buffer(name, torch.empty(shape, dtype=torch.float64))

    @property
    def dim(self) -> int:
        """Embedding dimension ``d`` (0 before :meth:`fit`)."""
        return self.mean.numel()

    @property
    def n_train(self) -> int:
        """Number of training embeddings the standardisation and coreset were drawn from (0 before fit)."""
        return int(self.train_size)

    @property
    def n_calib(self) -> int:
        """Number of calibration scores (0 before :meth:`fit`)."""
        return self.cal_scores.numel()

    def fit(self, train_emb: Tensor, calib_emb: Tensor, seed: int = 0) -> DomainScore:
        """Fit the standardisation and coreset on ``train_emb`` and calibrate on held-out ``calib_emb``.

        Parameters
        ----------
        train_emb : torch.Tensor
            Training-set embeddings, shape ``(n_train, d)``, ``n_train >= max(2, k)``.
        calib_emb : torch.Tensor
            Embeddings of held-out in-distribution inputs (the calibration split), shape ``(n_cal, d)``,
            ``n_cal >= 1/beta - 1``. They must not be training inputs: their scores would be too small.
        seed : int
            Seed of the random coreset draw.

        Returns
        -------
        DomainScore
            ``self``.

        Raises
        ------
        ValueError
            On bad shapes or values, too few points, or when most calibration rows also occur in ``train_emb``.

        """
        train = check_embeddings(train_emb, "train_emb").to(self.mean.device)
        calib = check_embeddings(calib_emb, "calib_emb", train.shape[1]).to(self.mean.device)
        if train.shape[0] < max(2, self.k):
            raise ValueError(f"train_emb has {train.shape[0]} rows; need at least max(2, k={self.k})")
        _check_beta_feasible(self.beta, calib.shape[0])
        seen = {row.tobytes() for row in train.cpu().numpy()}
        shared = sum(row.tobytes() in seen for row in calib.cpu().numpy())
        if 2 * shared > calib.shape[0]:
            raise ValueError(
                f"calib_emb shares {shared} of {calib.shape[0]} rows with train_emb; calibration inputs must be "
                "held out from training (pass the calibration split, not the training split)"
            )
        mean, std = train.mean(0), train.std(0)
        scale = std.clamp_min(max(_SCALE_FLOOR * float(std.mean()), 1e-12))
        gen = torch.Generator().manual_seed(int(seed))
        keep = torch.randperm(train.shape[0], generator=gen)[: self.max_reference].sort().values
        self.mean, self.scale, self.train_size = mean, scale, torch.tensor(train.shape[0], device=mean.device)
        self.reference = (train[keep.to(train.device)] - mean) / scale
        self.cal_scores = sort_scores(self.score(calib)).to(mean.device)
        return self

    def _check_fitted(self) -> None:
        if self.n_calib == 0:
            raise RuntimeError("DomainScore is not fitted; call fit(train_emb, calib_emb) or from_dict first")

    def score(self, emb: Tensor) -> Tensor:
        """Nonconformity score ``s(x)``, shape ``(m,)``: larger = farther from the training data."""
        if self.reference.numel() == 0:
            raise RuntimeError("DomainScore is not fitted; call fit(train_emb, calib_emb) or from_dict first")
        z = (check_embeddings(emb, "emb", self.dim).to(self.mean.device) - self.mean) / self.scale
        return knn_distance(z, self.reference, self.k)

    def pvalue(self, emb: Tensor) -> Tensor:
        """Conformal p-value ``(1 + #{s_i >= s(x)})/(n_cal + 1)`` of each row of ``emb`` ``(m, d)``; shape ``(m,)``."""
        self._check_fitted()
        return conformal_pvalues(self.cal_scores, self.score(emb))

    def flag(self, emb: Tensor, beta: float | None = None) -> Tensor:
        """Out-of-domain flags ``p(x) <= beta``, bool ``(m,)``; ``beta`` defaults to the fitted level."""
        self._check_fitted()
        beta = self.beta if beta is None else check_alpha(beta)
        _check_beta_feasible(beta, self.n_calib)
        return self.pvalue(emb) <= beta

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        resize_buffers(self, state_dict, prefix, ("mean", "scale", "reference", "cal_scores"))
        super()._load_from_state_dict(state_dict, prefix, *args)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe state: configuration, standardisation, coreset rows and sorted calibration scores."""
        self._check_fitted()
        return {
            "method": self.method,
            "format_version": FORMAT_VERSION,
            "k": self.k,
            "beta": self.beta,
            "max_reference": self.max_reference,
            "n_train": self.n_train,
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            "reference": self.reference.tolist(),
            "cal_scores": self.cal_scores.tolist(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DomainScore:
        """Rebuild from :meth:`to_dict` output (float64, lossless); every field is validated, nothing unpickled."""
        keys = {
            "method",
            "format_version",
            "k",
            "beta",
            "max_reference",
            "n_train",
            "mean",
            "scale",
            "reference",
            "cal_scores",
        }
        check_calibrator_dict(d, keys, cls.method)
        if d["format_version"] != FORMAT_VERSION:
            raise ValueError(
                f"domain score format_version {d['format_version']!r} is not supported (this sciml reads "
                f"{FORMAT_VERSION}); re-export the model with this version"
            )
        if not is_int(d["n_train"]) or d["n_train"] < 2:
            raise ValueError(f"'n_train' must be an integer >= 2, got {d['n_train']!r}")
        out = cls(k=d["k"], max_reference=d["max_reference"], beta=d["beta"])
        mean = torch.tensor(float_list(d["mean"], "mean"), dtype=torch.float64)
        scale = torch.tensor(float_list(d["scale"], "scale"), dtype=torch.float64)
        cal = torch.tensor(float_list(d["cal_scores"], "cal_scores"), dtype=torch.float64)
        if mean.numel() == 0 or scale.shape != mean.shape or not (scale > 0).all():
            raise ValueError("'mean' and 'scale' must be non-empty lists of the same length d, with scale > 0")
        ref = _matrix(d["reference"], "reference", mean.numel())
        if not out.k <= ref.shape[0] <= out.max_reference:
            raise ValueError(
                f"'reference' has {ref.shape[0]} rows; need between k={out.k} and max_reference={out.max_reference}"
            )
        if (cal < 0).any():
            raise ValueError("'cal_scores' must be >= 0 (they are distances)")
        _check_beta_feasible(out.beta, cal.numel())
        out.mean, out.scale, out.reference, out.cal_scores = mean, scale, ref, sort_scores(cal)
        out.train_size = torch.tensor(int(d["n_train"]))
        return out


def _matrix(raw: object, name: str, d: int) -> Tensor:
    """``raw`` as a float64 ``(r, d)`` tensor; ``ValueError`` unless it is a list of ``r`` rows of ``d`` numbers."""
    if not isinstance(raw, list | tuple) or not all(isinstance(r, list | tuple) and len(r) == d for r in raw):
        raise ValueError(f"{name!r} must be a list of rows, each a list of d={d} numbers")
    arr = np.array(raw) if raw else np.empty((0, d))
    if arr.dtype.kind not in "fiu" or arr.shape[1:] != (d,):
        raise ValueError(f"{name!r} must hold numbers only, as rows of length d={d}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name!r} must be finite (no NaN or inf)")
    return torch.from_numpy(arr.astype(np.float64))
