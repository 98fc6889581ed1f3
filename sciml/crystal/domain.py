"""Applicability domain of a crystal model: the ``domain.json`` of an artifact, fitted and read back.

A crystal artifact's ``domain.json`` holds two things, both computed from the model's learned representation
(:meth:`~sciml.crystal.model.CrystalModel.embed`, layer ``pooled`` by default: the structure features the
head reads):

* ``domain``: a fitted :class:`sciml.uq.domain.DomainScore` (k-NN conformal novelty test): standardisation and a
  seeded coreset of at most ``max_reference`` *train*-split embeddings, and the scores of the *calib* split.
  Its p-value is conformal, so a structure exchangeable with the calibration split is flagged (``p <= β``) with
  probability at most ``β``.
* ``train_sizes``: the smallest and largest training cell; other sizes are out of domain (a rule, like
  elements never seen in training: the network never saw such a cell).
* ``shift``: a seeded subset (at most ``max_shift`` rows) of calib-split embeddings, row-aligned with their
  nonconformity scores under the artifact's calibrator (and their Mondrian group labels when it groups), for
  weighted conformal prediction against a batch (``--shift-aware``, :mod:`sciml.crystal.shift`).

Size: ``(max_reference + max_shift) · d + 2d + n_calib`` floats (perov5, ``d = 128``: about 3 MB of JSON).
Reading validates every field (:meth:`CrystalDomain.from_dict`); nothing is unpickled.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from sciml.core import keys
from sciml.crystal.calibration import graph_structures
from sciml.crystal.model import EMBEDDING_LAYERS
from sciml.uq.domain import DomainScore
from sciml.uq.groups import structure_groups

__all__ = ["CrystalDomain", "collect", "fit_domain"]

FORMAT_VERSION = 1
FILE = "domain.json"
KEYS = {"format_version", "layer", "seed", "train_sizes", "domain", "shift"}


@dataclass
class CrystalDomain:
    """Domain test and shift-aware calibration data of one crystal model.

    Attributes
    ----------
    layer : str
        Embedding layer (:data:`sciml.crystal.model.EMBEDDING_LAYERS`).
    score : DomainScore
        Fitted novelty test.
    shift_emb : torch.Tensor
        Calibration embeddings ``(n_s, d)``, float64.
    shift_scores : torch.Tensor
        Their nonconformity scores under the artifact's calibrator ``(n_s,)``, float64.
    shift_groups : torch.Tensor or None
        Their Mondrian group labels ``(n_s,)`` int64 when the calibrator groups, else ``None``.
    seed : int
        Seed of the coreset and subset draws.
    train_sizes : tuple of int
        Smallest and largest cell (atoms) of the train split: a structure outside this range is out of domain
        whatever its p-value (the network never saw such a cell; for an extensive target its prediction
        ``n · f(x)`` extrapolates in ``n``).
    calibrator_sha256 : str
        sha256 of the ``calibrator.json`` the shift scores belong to; after ``sciml calibrate`` replaced the
        calibrator they no longer do, and ``--shift-aware`` refuses to run (the p-values stay valid).

    """

    layer: str
    score: DomainScore
    shift_emb: Tensor
    shift_scores: Tensor
    shift_groups: Tensor | None
    seed: int
    train_sizes: tuple[int, int]
    calibrator_sha256: str

    def size_known(self, n_atoms: int) -> bool:
        """Whether a cell of ``n_atoms`` atoms lies within :attr:`train_sizes`."""
        return self.train_sizes[0] <= n_atoms <= self.train_sizes[1]

    @property
    def beta(self) -> float:
        """Default flag level ``β``."""
        return self.score.beta

    def pvalue(self, emb: Tensor) -> Tensor:
        """Conformal domain p-value of each embedding row ``(m, d)``; shape ``(m,)``."""
        return self.score.pvalue(emb)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe state (the content of ``domain.json``), floats rounded to float32 precision.

        Rounding halves the file; :func:`fit_domain` returns the rounded state, so what export measures is
        exactly what a loaded artifact computes.
        """
        score = self.score.to_dict()
        score |= {key: _round32(score[key]) for key in ("mean", "scale", "reference", "cal_scores")}
        return {"format_version": FORMAT_VERSION, "layer": self.layer, "seed": self.seed,
                "train_sizes": list(self.train_sizes), "domain": score,
                "shift": {"calibrator_sha256": self.calibrator_sha256,
                          "embeddings": _round32(self.shift_emb.tolist()),
                          "scores": _round32(self.shift_scores.tolist()),
                          "groups": None if self.shift_groups is None else self.shift_groups.tolist()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CrystalDomain:
        """Rebuild from :meth:`to_dict` output; ``ValueError`` naming the field on anything malformed."""
        if not isinstance(d, Mapping) or set(d) != KEYS:
            raise ValueError("expected the keys format_version, layer, seed, train_sizes, domain, shift")
        if d["format_version"] != FORMAT_VERSION:
            raise ValueError(f"format_version {d['format_version']!r} is not supported (reads {FORMAT_VERSION})")
        if d["layer"] not in EMBEDDING_LAYERS:
            raise ValueError(f"'layer' must be one of {EMBEDDING_LAYERS}, got {d['layer']!r}")
        if not isinstance(d["seed"], int) or isinstance(d["seed"], bool):
            raise ValueError(f"'seed' must be an integer, got {d['seed']!r}")
        sizes = d["train_sizes"]
        if (not isinstance(sizes, list) or len(sizes) != 2 or not all(isinstance(n, int) for n in sizes)
                or not 1 <= sizes[0] <= sizes[1]):
            raise ValueError(f"'train_sizes' must be [smallest, largest] cell sizes (atoms), got {sizes!r}")
        score = DomainScore.from_dict(d["domain"])
        shift = d["shift"]
        if not isinstance(shift, Mapping) or set(shift) != {"calibrator_sha256", "embeddings", "scores", "groups"}:
            raise ValueError("'shift' must hold calibrator_sha256, embeddings, scores, groups")
        if not isinstance(shift["calibrator_sha256"], str):
            raise ValueError("'shift.calibrator_sha256' must be a string")
        emb = _tensor(shift["embeddings"], "shift.embeddings", torch.float64)
        scores = _tensor(shift["scores"], "shift.scores", torch.float64)
        if emb.numel() == 0:  # no shift subset (a calibrator without a shift-aware mode)
            emb = emb.reshape(0, score.dim)
        if emb.dim() != 2 or emb.shape[1] != score.dim or scores.shape != emb.shape[:1] or (scores < 0).any():
            raise ValueError(f"'shift' needs embeddings (n, {score.dim}) and as many scores >= 0")
        groups = None
        if shift["groups"] is not None:
            groups = _tensor(shift["groups"], "shift.groups", torch.int64)
            if groups.shape != scores.shape:
                raise ValueError("'shift.groups' needs one label per score")
        return cls(d["layer"], score, emb, scores, groups, d["seed"], (sizes[0], sizes[1]),
                   shift["calibrator_sha256"])


def _round32(values: list) -> list:
    """Nested list of floats rounded to the shortest decimal that reads back as the same float32."""
    arr = np.asarray(values, dtype=np.float32)
    return [float(str(v)) for v in arr.reshape(-1)] if arr.ndim == 1 else [_round32(row) for row in arr]


def _tensor(raw: object, name: str, dtype: torch.dtype) -> Tensor:
    try:
        out = torch.tensor(raw, dtype=dtype)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"{name!r} must be a (nested) list of numbers") from None
    if dtype.is_floating_point and not torch.isfinite(out).all():
        raise ValueError(f"{name!r} must be finite")
    if dtype == torch.int64 and not all(float(v).is_integer() for v in torch.tensor(raw).flatten().tolist()):
        raise ValueError(f"{name!r} must hold integers")
    return out


@torch.no_grad()
def collect(module, loader, layer: str = "pooled", with_structures: bool = False) -> dict[str, Any]:
    """One pass over ``loader``: ``mean``, ``sigma``, ``y`` ``(n,)``, ``emb`` ``(n, d)`` (and ``structures``)."""
    was_training = module.training
    module.eval()
    out: dict[str, list] = {"mean": [], "sigma": [], "y": [], "emb": [], "structures": []}
    for batch in loader:
        pred = module.predict_step(batch, 0)
        out["mean"].append(pred.mean.double())
        out["sigma"].append(pred.sigma.double())
        out["y"].append(batch[keys.TARGET].double())
        out["emb"].append(module.embed(batch, layer).double())
        if with_structures:
            out["structures"].extend(graph_structures(batch))
    module.train(was_training)
    return {k: (v if k == "structures" else torch.cat(v)) for k, v in out.items()}


def fit_domain(module, dm, calibrator, *, layer: str = "pooled", k: int = 5, max_reference: int = 1000,
               beta: float = 0.05, max_shift: int = 1000, seed: int = 0, calibrator_sha256: str | None = None
               ) -> CrystalDomain:
    """Fit the domain test on ``dm``'s train split, calibrate it on the calib split, keep the shift subset.

    Parameters
    ----------
    module : CrystalModel
        The trained model (eval mode is set here).
    dm : CrystalDataModule
        The set-up data module of the model's recorded split.
    calibrator : torch.nn.Module
        The artifact's fitted calibrator (its score function gives the shift scores, its ``group_by`` the
        groups).
    layer, k, max_reference, beta, max_shift, seed
        Embedding layer, :class:`~sciml.uq.domain.DomainScore` settings, shift-subset size, seed of both draws.
    calibrator_sha256 : str, optional
        sha256 of the artifact's ``calibrator.json`` (default: of ``json.dumps(calibrator.to_dict())``, the text
        the artifact writer stores).

    """
    train = collect(module, dm.loader("train"), layer)
    group_by = getattr(calibrator, "group_by", None)
    # shift-aware intervals reweight one score per point: split and Mondrian calibrators only
    shift = hasattr(calibrator, "score_fn") and isinstance(group_by, str | None)
    cal = collect(module, dm.loader("calib"), layer, with_structures=shift and group_by is not None)
    score = DomainScore(k=k, max_reference=max_reference, beta=beta).fit(train["emb"], cal["emb"], seed=seed)
    if shift:
        scores = calibrator.score_fn.score(cal["mean"], cal["y"], cal["sigma"]).double()
    else:
        scores, group_by, max_shift = torch.zeros(len(cal["y"]), dtype=torch.float64), None, 0
    groups = structure_groups(group_by, cal["structures"]) if group_by is not None else None
    keep = torch.randperm(len(scores), generator=torch.Generator().manual_seed(seed))[:max_shift].sort().values
    sizes = [int(g[keys.N_ATOMS]) for g in dm.datasets["train"]]
    fitted = CrystalDomain(layer, score, cal["emb"][keep], scores[keep], None if groups is None else groups[keep],
                           seed, (min(sizes), max(sizes)),
                           calibrator_sha256 or hashlib.sha256(json.dumps(calibrator.to_dict()).encode()).hexdigest())
    return CrystalDomain.from_dict(fitted.to_dict())  # the state a loaded artifact will have
