r"""The prior mean of a condition's effect, from its singles' effects and :class:`PriorSettings` (one pure function).

For a condition ``c`` perturbing genes ``a`` (and ``b``) with known single effects ``Δa, Δb`` ``(G,)``:

* a single, or a double with an unknown single: ``Δa (+ Δb)`` (an unknown single counts as 0, or under
  ``additive_fallback`` as the stand-in effect the caller puts in its place);
* a double with both singles known, by ``settings.prior``: ``additive`` ``Δa + Δb``; ``combination``
  ``Δa + Δb + λ·(rule(Δa, Δb) − Δa − Δb)``; ``masking``
  :func:`~sciml.perturbation.nn.masking.masking_prior` with ``κ`` and ``τ`` (or of the empirical-Bayes shrunk
  singles, ``denoise: eb*``), then under ``closure`` rescaled to the controls' total
  (:func:`~sciml.perturbation.nn.masking.close`), then under ``blend`` ``w < 1`` averaged with the combination
  rule's: ``w·masking + (1 − w)·combination``. Under ``own_genes: additive`` the perturbed genes' own columns stay
  ``Δa + Δb``; under ``additive_fallback`` every condition is additive.

What the rule reads besides the conditions' singles (the singles' variances, their shrunk table, the fitted
rule, the closure terms) comes in :class:`PriorTables`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from sciml.perturbation.nn.masking import close, masking, masking_prior
from sciml.perturbation.nn.shrinkage import ash_by_row, ash_posterior_mean
from sciml.perturbation.settings import PriorSettings

__all__ = ["DENOISERS", "PriorTables", "Singles", "condition_singles", "mean_single", "own_columns", "prior_mean",
           "shrunk_table"]

#: ``flow.denoise`` names (:data:`~sciml.perturbation.settings.DENOISER_NAMES`): one prior for all singles, one
#: per single, one per single of the singles estimated with the training doubles
DENOISERS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"eb": ash_posterior_mean, "eb_single": ash_by_row,
                                                            "eb_joint": ash_by_row}


@dataclass(frozen=True)
class Singles:
    """Measured single effects by vocabulary index (float32; rows of unknown singles are 0).

    Attributes
    ----------
    effect : Tensor
        ``(V, G)`` mean effects (log1p units).
    var : Tensor
        ``(V, G)`` their squared standard errors (0 where none was given).
    known : Tensor
        Bool ``(V,)``: the single was measured.

    """

    effect: Tensor
    var: Tensor
    known: Tensor

    @classmethod
    def from_measured(cls, effects: Mapping[int, Tensor], variances: Mapping[int, Tensor] | None, n_vocab: int,
                      n_genes: int) -> Singles:
        """Tables of ``{vocabulary index: Δ (G,)}`` and their squared standard errors (same keys; 0 if absent)."""
        effect, var = torch.zeros(n_vocab, n_genes), torch.zeros(n_vocab, n_genes)
        known = torch.zeros(n_vocab, dtype=torch.bool)
        for i, delta in effects.items():
            effect[i] = torch.as_tensor(delta, dtype=effect.dtype)
            known[i] = True
        for i, v in (variances or {}).items():
            var[i] = torch.as_tensor(v, dtype=var.dtype)
        return cls(effect, var, known)

    def mean_effect(self) -> Tensor:
        """Mean ``(G,)`` of the known single effects (zeros when none): the stand-in of an unknown single."""
        return mean_single(self.effect, self.known)


def mean_single(effect: Tensor, known: Tensor) -> Tensor:
    """Mean ``(G,)`` of the rows ``known`` ``(V,)`` of single effects ``(V, G)`` (zeros when none)."""
    return effect[known].mean(0) if bool(known.any()) else torch.zeros_like(effect[0])


@dataclass(frozen=True)
class PriorTables:
    """What the prior mean reads besides the conditions' singles (each ``None`` where the settings need none).

    Attributes
    ----------
    var : Tensor or None
        ``(V, G)`` squared standard errors of the single effects, by vocabulary index (masking ``τ``).
    shrunk : Tensor or None
        ``(V, G)`` empirical-Bayes shrunk singles (masking with ``denoise: eb*``, :func:`shrunk_table`).
    rule : callable or None
        The fitted combination rule ``(Δa, Δb) -> Δab`` over ``(..., G)`` (prior ``combination``, or ``blend``).
    closure : Tensor or None
        ``(2, G)`` :func:`~sciml.perturbation.nn.masking.closure_terms` (masking with ``closure``).

    """

    var: Tensor | None = None
    shrunk: Tensor | None = None
    rule: Callable[[Tensor, Tensor], Tensor] | None = None
    closure: Tensor | None = None


def shrunk_table(effect: Tensor, var: Tensor, known: Tensor, denoise: str) -> Tensor:
    """``(V, G)`` singles ``effect`` with the ``known`` rows ``(V,)`` shrunk by :data:`DENOISERS` ``[denoise]``."""
    table = effect.clone()
    table[known] = DENOISERS[denoise](effect[known], var[known])
    return table


def own_columns(pert: Tensor, n: int) -> Tensor:
    """Bool ``(C, n)``: column ``g`` is one of the perturbed genes of the condition (``pert`` ``(C, P)``)."""
    return (torch.arange(n, device=pert.device)[None, :, None] == pert[:, None, :]).any(-1)


def condition_singles(pert: Tensor, effect: Tensor, known: Tensor,
                      stand_in: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Single effects ``(C, P, G)`` and known mask ``(C, P)`` of conditions ``pert`` ``(C, P)`` (−1: padding).

    ``effect`` ``(V, G)`` and ``known`` ``(V,)`` are the singles by vocabulary index; an unknown single counts as 0,
    or as ``stand_in`` ``(G,)`` when given (the additive fallback's stand-in).
    """
    valid = pert >= 0
    mask = valid & known[pert.clamp_min(0)]
    d = effect[pert.clamp_min(0)] * mask[..., None]
    if stand_in is not None:
        d = d + (valid & ~mask)[..., None] * stand_in
    return d, mask


def prior_mean(d: Tensor, known: Tensor, pert: Tensor, settings: PriorSettings, tables: PriorTables) -> Tensor:
    """Prior mean effect ``(C, G)`` of conditions with single effects ``d`` ``(C, P, G)`` (module docstring).

    Parameters
    ----------
    d : Tensor
        The conditions' single effects (0 where unknown), :func:`condition_singles`.
    known : Tensor
        Bool ``(C, P)``: the single is known (a double's rule applies where both are).
    pert : Tensor
        int64 ``(C, P)`` vocabulary indices (−1: padding): the rows of ``tables`` and the own columns.
    settings : PriorSettings
        How the prior is formed.
    tables : PriorTables
        What the settings read besides ``d``.

    """
    total = d.sum(1)
    if d.shape[1] != 2:
        return total
    w = settings.blend
    comb = _combination(d, settings, tables) if w < 1.0 and settings.prior == "masking" else None
    rule = _double_rule(d, pert, settings, tables)
    if rule is None and comb is None:
        return total
    rows = known.all(-1)[:, None]
    both = rows & ~own_columns(pert, d.shape[-1]) if settings.own_genes == "additive" else rows
    out = total if rule is None else torch.where(both, rule, total)
    if rule is not None and settings.closed:
        out = torch.where(rows, close(out, tables.closure), out)
    if comb is not None:
        out = torch.where(rows, w * out + (1.0 - w) * torch.where(both, comb, total), out)
    return out


def _double_rule(d: Tensor, pert: Tensor, settings: PriorSettings, tables: PriorTables) -> Tensor | None:
    """Prior mean ``(C, G)`` of doubles ``d`` ``(C, 2, G)`` by ``settings.prior``; ``None`` where it is additive."""
    if settings.additive_fallback:
        return None
    if settings.prior == "combination":
        return _combination(d, settings, tables)
    if settings.prior != "masking":
        return None
    kappa = settings.kappa_value
    if settings.empirical_bayes:
        shrunk = tables.shrunk[pert.clamp_min(0)]
        return masking(shrunk[:, 0], shrunk[:, 1], kappa)
    tau = settings.tau
    if kappa == 0.0 and tau == 0.0 and not settings.closed:
        return None
    var = tables.var[pert.clamp_min(0)]
    return masking_prior(d[:, 0], d[:, 1], var[:, 0], var[:, 1], kappa, tau)


def _combination(d: Tensor, settings: PriorSettings, tables: PriorTables) -> Tensor | None:
    """``Δa + Δb + λ·(rule − Δa − Δb)`` ``(C, G)`` of doubles ``d`` ``(C, 2, G)``; ``None`` when ``λ = 0``."""
    lam = settings.rule_weight
    if tables.rule is None or lam == 0.0:
        return None
    total = d.sum(1)
    return total + lam * (tables.rule(d[:, 0], d[:, 1]) - total)
