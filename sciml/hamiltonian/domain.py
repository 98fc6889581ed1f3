r"""Applicability domain and adaptive orbital-energy intervals of a molecule model (the artifact's ``domain.json``).

**Embedding.** :func:`sciml.hamiltonian.embed.h0_embedding` (pooled ``0e`` irreps of H0: invariant to rotation,
translation and atom order), standardised and whitened on its principal components (those carrying at least
``1e-4`` of the variance, at most 16) fitted on the *reference* structures. Whitening gives every independent
direction of the (low-dimensional) conformer manifold the same weight; plain standardisation lets the many
features of the O–H bonds drown a distorted bond angle (a poorly predicted conformer with a distorted angle
passes unflagged with standardisation only, not with whitening; ``docs/hamiltonian.md``).

**Domain test.** A :class:`sciml.uq.domain.DomainScore` (k-NN conformal novelty test) with the reference coreset
drawn from a seeded part (``1 - holdout``) of the *train* split and calibrated on the rest of the train split plus
the *calib* split. This is valid because the embedding has no learned parameter and the whitening is fitted on
the reference structures only: the held-out train structures are as exchangeable with a new input as the calib
ones, and a larger domain-calibration set gives finer p-values (``β`` down to ``1/(n + 1)``). For a split by
molecule the hold-out takes whole molecules (:func:`group_order`): a held-out conformer whose molecule stayed in
the reference would be closer to it than a new molecule is, and the test would then flag new molecules too often.

**Adaptive intervals.** The same k-NN distance ``s(x)`` sets the scale of the orbital-energy intervals,
``σ(x) = 1 + (s(x)/s̃)^γ`` (``γ = sigma_power``, default 2; ``s̃`` the median domain-calibration score;
``γ = 0``: ``σ = 1``): a floor for the error that does not vanish near the training data, plus a term for the
ridge base, linear in its features, whose error away from the data grows like the second-order Taylor remainder,
the square of the distance. (Measured on water, ``benchmarks/domain_hamiltonian.py``: ``σ = s^2`` without the floor
made the intervals of the most typical structures too narrow, their misses concentrating at small ``s``.)
The calibrator is Mondrian by orbital (group = orbital index minus the number of occupied orbitals: HOMO −1,
LUMO 0) on the normalised score ``|ε − ε̂| / σ(x)``: per-orbital widths,
wider for atypical structures, valid marginally for exchangeable structures whatever σ is (Lei et al. 2018).
Deep groups too small for a finite width at the calibration level are pooled (:func:`pool_deep_groups`).

**Declared domain wider than the training set** (``extra``). A model trained on narrow conformers may be
accurate on broader ones; calibrating only on training-like structures would then flag most of those. Extra
labelled structures the model never saw, drawn from the broader distribution, are split (seeded): part joins
the reference set, the rest joins both the domain-calibration set and the interval calibration. Nothing is
refitted but the domain test and the calibrator; the guarantees are for inputs drawn like the calibration set,
a mixture of training-like and extra structures (stated in the model card).

**Shift-aware data.** The calib split's (and held-out extra structures') whitened embeddings and normalised
scores (for :mod:`sciml.hamiltonian.shift`). Size: ``(n_reference + n_calib) · r + d (r + 2)`` floats plus the scores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from sciml.hamiltonian.embed import EMBEDDING, h0_embedding
from sciml.uq.domain import DomainScore

__all__ = ["FILE", "HamiltonianDomain", "fit_domain", "orbital_groups", "pool_deep_groups"]

FORMAT_VERSION = 1
FILE = "domain.json"
MIN_VARIANCE = 1e-4  # principal components kept: variance fraction >= this
MAX_COMPONENTS = 16


def orbital_groups(n_eig: Tensor, n_occ: Tensor, known: Tensor | None = None) -> Tensor:
    """Mondrian group of every predicted orbital: index within its molecule minus ``n_occ`` (HOMO −1, LUMO 0).

    ``n_eig``, ``n_occ``: ``(G,)`` int64 per molecule; returns ``(Σ n_eig,)`` int64. ``known``: the calibrated
    groups; orbitals outside their range (deeper than the deepest calibrated orbital: a molecule with more
    electrons than every calibration molecule) take the nearest calibrated group (:func:`outside_groups` counts
    them: their width is borrowed, not calibrated).
    """
    groups = torch.cat([torch.arange(int(k)) - int(o) for k, o in zip(n_eig, n_occ, strict=True)]).long()
    if known is not None and len(known):
        groups = groups.clamp(int(known.min()), int(known.max()))
    return groups


def pool_deep_groups(groups: Tensor, min_count: int) -> Tensor:
    """Merge the deepest orbital groups until every group holds at least ``min_count`` orbitals.

    A Mondrian group with fewer than ``⌈1/α⌉ − 1`` calibration scores has an infinite threshold at level ``α``.
    Deep orbitals exist only in the largest calibration molecules, so their groups are small. The floor ``g`` is
    the deepest group such that every group above it holds ``min_count`` scores and the groups at or below it do
    together; groups below ``g`` are clamped to ``g``. This keeps the Mondrian guarantee for the coarser partition
    (Vovk 2012) with finite widths. Unchanged when no such floor exists (too few structures overall).
    """
    values, counts = torch.unique(groups, sorted=True, return_counts=True)
    small = (counts < min_count).flip(0).cumsum(0).flip(0)  # small groups at or above each depth
    above_ok = torch.cat([small[1:], small.new_zeros(1)]) == 0
    enough = ((torch.cumsum(counts, 0) >= min_count) & above_ok).nonzero().flatten()
    return groups.clamp_min(int(values[enough[0]])) if len(enough) else groups


def outside_groups(n_eig: Tensor, n_occ: Tensor, known: Tensor) -> Tensor:
    """``(Σ n_eig,)`` bool: orbitals whose group no calibration molecule had (see :func:`orbital_groups`)."""
    raw = orbital_groups(n_eig, n_occ)
    return (raw < int(known.min())) | (raw > int(known.max()))


@dataclass
class HamiltonianDomain:
    """Domain test, interval scale and shift-aware calibration data of one molecule model (module docstring).

    Attributes
    ----------
    mean, scale : torch.Tensor
        Standardisation of the raw embedding, ``(d,)``.
    components : torch.Tensor
        Whitening projection ``(d, r)``: ``z = ((e − mean)/scale) @ components`` has unit variance per column on
        the reference structures.
    score : DomainScore
        Fitted on whitened embeddings.
    sigma_power : float
        ``γ`` of ``σ(x) = 1 + (s(x)/s̃)^γ``.
    shift_emb : torch.Tensor
        Whitened calib-split embeddings ``(n_s, r)``.
    shift_rows, shift_groups : torch.Tensor
        For each calibration orbital: its structure (row of ``shift_emb``) and orbital group, int64 ``(n_o,)``.
    shift_scores : torch.Tensor
        Its normalised score ``|ε − ε̂| / σ(x)``, ``(n_o,)``.
    seed : int
        Seed of the reference/hold-out split and of the coreset.

    """

    mean: Tensor
    scale: Tensor
    components: Tensor
    score: DomainScore
    sigma_power: float
    shift_emb: Tensor
    shift_rows: Tensor
    shift_groups: Tensor
    shift_scores: Tensor
    seed: int

    @property
    def beta(self) -> float:
        """Default flag level ``β``."""
        return self.score.beta

    def project(self, emb: Tensor) -> Tensor:
        """Whitened embedding ``(m, r)`` of raw embeddings ``(m, d)`` (:func:`h0_embedding`)."""
        if emb.dim() != 2 or emb.shape[1] != self.mean.numel():
            raise ValueError(f"embedding has shape {tuple(emb.shape)}, the domain was fitted on d={self.mean.numel()}")
        return ((emb.double() - self.mean) / self.scale) @ self.components

    def pvalue(self, emb: Tensor) -> Tensor:
        """Conformal domain p-value of each raw embedding row; ``(m,)``."""
        return self.score.pvalue(self.project(emb))

    def sigma(self, emb: Tensor) -> Tensor:
        """Interval scale ``σ(x) = 1 + (s(x)/s̃)^γ`` of each raw embedding row, ``(m,)`` (>= 1; 1 when ``γ = 0``)."""
        if self.sigma_power == 0:
            return torch.ones(emb.shape[0], dtype=torch.float64)
        s = self.score.score(self.project(emb)) / self.score.cal_scores.median()
        return 1 + s**self.sigma_power

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe state (the content of ``domain.json``)."""
        return {"format_version": FORMAT_VERSION, "embedding": EMBEDDING, "seed": self.seed,
                "sigma_power": self.sigma_power,
                "whitening": {"mean": self.mean.tolist(), "scale": self.scale.tolist(),
                              "components": self.components.tolist()},
                "domain": self.score.to_dict(),
                "shift": {"embeddings": self.shift_emb.tolist(), "rows": self.shift_rows.tolist(),
                          "groups": self.shift_groups.tolist(), "scores": self.shift_scores.tolist()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HamiltonianDomain:
        """Rebuild from :meth:`to_dict` output; ``ValueError`` naming the field on anything malformed."""
        keys = {"format_version", "embedding", "seed", "sigma_power", "whitening", "domain", "shift"}
        if not isinstance(d, Mapping) or set(d) != keys:
            raise ValueError(f"expected the keys {sorted(keys)}")
        if d["format_version"] != FORMAT_VERSION:
            raise ValueError(f"format_version {d['format_version']!r} is not supported (reads {FORMAT_VERSION})")
        if d["embedding"] != EMBEDDING:
            raise ValueError(f"'embedding' {d['embedding']!r} is not known (this sciml computes {EMBEDDING!r})")
        if not isinstance(d["seed"], int) or isinstance(d["seed"], bool):
            raise ValueError(f"'seed' must be an integer, got {d['seed']!r}")
        power = d["sigma_power"]
        if not isinstance(power, int | float) or isinstance(power, bool) or not 0 <= power <= 4:
            raise ValueError(f"'sigma_power' must be a number in [0, 4], got {power!r}")
        w, s = d["whitening"], d["shift"]
        if not isinstance(w, Mapping) or set(w) != {"mean", "scale", "components"}:
            raise ValueError("'whitening' must hold mean, scale, components")
        if not isinstance(s, Mapping) or set(s) != {"embeddings", "rows", "groups", "scores"}:
            raise ValueError("'shift' must hold embeddings, rows, groups, scores")
        mean, scale = _tensor(w["mean"], "whitening.mean"), _tensor(w["scale"], "whitening.scale")
        comp = _tensor(w["components"], "whitening.components")
        score = DomainScore.from_dict(d["domain"])
        if mean.dim() != 1 or scale.shape != mean.shape or not (scale > 0).all() or comp.dim() != 2 or \
                comp.shape != (mean.numel(), score.dim):
            raise ValueError(f"'whitening' needs mean and scale (d,) with scale > 0 and components (d, {score.dim})")
        emb, scores = _tensor(s["embeddings"], "shift.embeddings"), _tensor(s["scores"], "shift.scores")
        rows, groups = _tensor(s["rows"], "shift.rows", torch.int64), _tensor(s["groups"], "shift.groups", torch.int64)
        if emb.dim() != 2 or emb.shape[1] != score.dim or not rows.shape == groups.shape == scores.shape or \
                scores.dim() != 1 or (scores < 0).any() or (rows.numel() and not 0 <= int(rows.min()) <=
                                                             int(rows.max()) < emb.shape[0]):
            raise ValueError(f"'shift' needs embeddings (n, {score.dim}) and rows (< n), groups, scores >= 0 of one "
                             "length")
        return cls(mean, scale, comp, score, float(power), emb, rows, groups, scores, d["seed"])


def _tensor(raw: object, name: str, dtype: torch.dtype = torch.float64) -> Tensor:
    try:
        out = torch.tensor(raw, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"{name!r} must be a (nested) list of numbers") from None
    if not torch.isfinite(out).all():
        raise ValueError(f"{name!r} must be finite")
    if dtype == torch.int64:
        if not (out == out.round()).all():
            raise ValueError(f"{name!r} must hold integers")
        return out.long()
    return out


def whitening(emb: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``mean (d,)``, ``scale (d,)`` and ``components (d, r)`` whitening reference embeddings ``(n, d)``."""
    mean, scale = emb.mean(0), emb.std(0)
    scale = torch.where(scale > 1e-12 * scale.max().clamp_min(1e-300), scale, torch.ones_like(scale))
    z = (emb - mean) / scale
    _, sv, vh = torch.linalg.svd(z, full_matrices=False)
    frac = sv**2 / (sv**2).sum()
    r = max(1, min(int((frac >= MIN_VARIANCE).sum()), MAX_COMPONENTS))
    return mean, scale, vh[:r].T / (sv[:r] / max(len(z) - 1, 1) ** 0.5)


@torch.no_grad()
def structure_errors(module, batch) -> tuple[Tensor, Tensor, Tensor]:
    """Raw embeddings ``(G, d)``, predicted and reference orbital energies ``(Σ n_eig,)`` (Hartree) of a batch."""
    from sciml.hamiltonian.loss import orbital_energies

    module.eval()
    h = module(batch)[0]
    return h0_embedding(batch, module.node_basis, module.edge_basis), orbital_energies(h, batch), batch.y


#: structures per network call when a whole split is scored (bounded memory for a split of any size)
ERRORS_CHUNK = 16


def split_errors(module, samples: list[dict], collate, chunk: int = ERRORS_CHUNK) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`structure_errors` of featurised structures ``samples``, ``chunk`` at a time (no gradients).

    Returns the embeddings ``(G, d)`` and the predicted and reference orbital energies ``(Σ n_eig,)`` (Hartree),
    concatenated in the order of ``samples``.
    """
    with torch.no_grad():
        parts = [structure_errors(module, collate(samples[k:k + chunk])) for k in range(0, len(samples), chunk)]
    return tuple(torch.cat(p) for p in zip(*parts, strict=True))


def orbital_counts(samples: list[dict]) -> tuple[Tensor, Tensor]:
    """Orbital energies and doubly occupied orbitals per structure, ``(G,)`` each, of featurised ``samples``."""
    return tuple(torch.cat([sample[key] for sample in samples]) for key in ("n_eig", "n_occ"))


def split_embedding(samples: list[dict], collate, node_basis, edge_basis, chunk: int = 256) -> Tensor:
    """:func:`~sciml.hamiltonian.embed.h0_embedding` ``(G, d)`` of ``samples``, ``chunk`` structures at a time."""
    return torch.cat([h0_embedding(collate(samples[k:k + chunk]), node_basis, edge_basis)
                      for k in range(0, len(samples), chunk)])


def train_groups(dm) -> list[str] | None:
    """Molecule of every train structure when ``dm`` is split by molecule (``split.by: molecule``), else ``None``."""
    if getattr(dm, "split_by", "conformer") != "molecule" or not hasattr(dm, "structures"):
        return None
    names = [str(s.meta.get("molecule", "")) for s in dm.structures["train"]]
    return names if len(set(names)) > 1 else None


def group_order(groups: list[str], seed: int) -> Tensor:
    """Structure indices ordered by a seeded permutation of their groups (all of a group's structures together).

    Taking a prefix of it as the domain-calibration hold-out keeps every held-out group out of the reference set.
    """
    names = sorted(set(groups))
    order = torch.randperm(len(names), generator=torch.Generator().manual_seed(seed)).tolist()
    rank = {names[i]: r for r, i in enumerate(order)}
    return torch.tensor(sorted(range(len(groups)), key=lambda i: (rank[groups[i]], i)), dtype=torch.long)


def fit_domain(module, dm, *, k: int = 5, beta: float = 0.05, holdout: float = 0.3, max_reference: int = 1000,
               sigma_power: float = 2.0, seed: int = 0, extra: list | None = None,
               extra_holdout: float = 0.5) -> HamiltonianDomain:
    """Fit the domain test and interval scale on ``dm``'s train and calib splits (module docstring).

    ``extra`` widens the declared domain: featurised structures (``dm.sample`` of each) the model never saw,
    drawn from the broader distribution the model should be trusted on. A seeded ``extra_holdout`` fraction of
    them joins the domain-calibration set *and* the calib split's interval calibration (their model errors are
    honest: not trained on); the rest joins the reference set. The conformal guarantees then hold for an input
    drawn like a calibration structure, i.e. from the mixture of the training-like and the extra structures in
    the calibration set's proportions (docs/hamiltonian.md, "declared domain").

    Parameters
    ----------
    module : HamiltonianModule
        The trained molecule model.
    dm : HamiltonianDataModule
        Its data module, set up with the recorded split.
    k, beta, max_reference
        :class:`~sciml.uq.domain.DomainScore` settings.
    holdout : float
        Fraction of the train split held out of the reference set to calibrate the domain test (raised when
        the calib split is too small for a p-value <= ``beta``).
    sigma_power : float
        ``γ`` of the interval scale.
    seed : int
        Seed of the hold-out draw, the split of ``extra`` and the coreset.
    extra : list of dict, optional
        Extra in-domain structures, featurised like the splits' (``dm.sample``).
    extra_holdout : float
        Fraction of ``extra`` used for calibration (domain test and intervals), in ``(0, 1]``; the rest is reference.

    """
    calib_samples, extra_ref = list(dm.datasets["calib"]), None
    if extra:
        if not 0 < extra_holdout <= 1:
            raise ValueError(f"extra_holdout must be in (0, 1], got {extra_holdout!r}")
        order = torch.randperm(len(extra), generator=torch.Generator().manual_seed(seed)).tolist()
        n_x = max(1, int(round(extra_holdout * len(extra))))
        calib_samples += [extra[i] for i in order[:n_x]]
        if n_x < len(extra):
            extra_ref = split_embedding([extra[i] for i in order[n_x:]], dm.collate_fn, module.node_basis,
                                        module.edge_basis)
    e_train = split_embedding(dm.datasets["train"], dm.collate_fn, module.node_basis, module.edge_basis)
    n = len(e_train)
    groups = train_groups(dm)  # a by-molecule split: hold out whole molecules, so calibration sees new molecules
    perm = (group_order(groups, seed) if groups is not None
            else torch.randperm(n, generator=torch.Generator().manual_seed(seed)))
    e_cal, eps, y = split_errors(module, calib_samples, dm.collate_fn)
    need = math.ceil(1 / beta - 1e-9) - 1  # smallest domain-calibration set with a p-value <= beta
    n_hold = min(max(int(round(holdout * n)), need - len(e_cal)), n - max(k, 2))
    if n_hold + len(e_cal) < need:
        raise ValueError(f"the domain test at beta={beta} needs {need} held-out structures (train hold-out + calib) "
                         f"and {max(k, 2)} reference ones; the splits have {n} train and {len(e_cal)} calib: add data "
                         "or raise calibration.domain.beta")
    while groups is not None and 0 < n_hold < n - max(k, 2) and groups[perm[n_hold]] == groups[perm[n_hold - 1]]:
        n_hold += 1  # to the end of the last held-out molecule
    ref, hold = e_train[perm[n_hold:]], e_train[perm[:n_hold]]
    if extra_ref is not None:
        ref = torch.cat([ref, extra_ref])
    mean, scale, comp = whitening(ref)
    proj = lambda e: ((e - mean) / scale) @ comp  # noqa: E731
    score = DomainScore(k=k, max_reference=max(max_reference, k), beta=beta).fit(
        proj(ref), proj(torch.cat([hold, e_cal])), seed=seed)
    dom = HamiltonianDomain(mean, scale, comp, score, float(sigma_power), proj(e_cal), torch.zeros(0, dtype=torch.long),
                            torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.float64), seed)
    sigma = dom.sigma(e_cal)
    n_eig, n_occ = orbital_counts(calib_samples)
    dom.shift_rows = torch.repeat_interleave(torch.arange(len(e_cal)), n_eig)
    dom.shift_groups = orbital_groups(n_eig, n_occ)
    dom.shift_scores = ((eps - y).abs() / sigma[dom.shift_rows]).double()
    return dom
