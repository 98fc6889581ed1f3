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
           "move_rows", "n_table_rows", "shrunk_table", "table_rows"]

#: ``flow.denoise`` names (:data:`~sciml.perturbation.settings.DENOISER_NAMES`): one prior for all singles, one
#: per single, one per single of the singles estimated with the training doubles
DENOISERS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"eb": ash_posterior_mean, "eb_single": ash_by_row,
                                                            "eb_joint": ash_by_row}


def table_rows(indices, n_vocab: int) -> Tensor:
    """Row of each vocabulary entry ``(V,)`` int64 in a compact singles table.

    ``indices`` get rows ``1, 2, ...`` in ascending order, every other entry row 0 (a row of zeros).
    """
    rows = torch.zeros(n_vocab, dtype=torch.long)
    order = sorted({int(i) for i in indices})
    rows[order] = torch.arange(1, len(order) + 1)
    return rows


def n_table_rows(rows: Tensor) -> int:
    """Rows ``R`` of a compact table with layout ``rows`` ``(V,)`` (row 0 included)."""
    return int(rows.max()) + 1 if len(rows) else 1


def move_rows(table: Tensor, known: Tensor, source: Tensor, target: Tensor) -> Tensor:
    """The rows of the ``known`` ``(V,)`` singles of ``table`` (layout ``source``) in a new table of layout ``target``.

    Every other row is 0. A known single without a row in ``target`` is a ``ValueError``.
    """
    vocab = torch.nonzero(known).flatten()
    if bool((target[vocab] == 0).any()):
        missing = vocab[target[vocab] == 0].tolist()[:5]
        raise ValueError(f"vocabulary entries {missing} have a measured single but no row in the table layout: they "
                         "are not among the genes perturbed in training (the model's perturbed_genes)")
    out = table.new_zeros(n_table_rows(target), table.shape[1])
    out[target[vocab]] = table[source[vocab]]
    return out


@dataclass(frozen=True)
class Singles:
    """Measured single effects in a compact table: one row per vocabulary entry that can have a single, row 0 zeros.

    A screen perturbs a few hundred of its thousands of genes, so the tables are ``(R, G)`` with ``R − 1`` the genes
    that can have a single, not ``(V, G)``: memory linear in the genes. ``rows[v]`` is the row of vocabulary entry
    ``v`` (0 for an entry without a single); read entry ``v`` as ``effect[rows[v]]`` (:meth:`take`).

    Attributes
    ----------
    effect : Tensor
        ``(R, G)`` mean effects (log1p units; row 0 and rows of unknown singles are 0).
    var : Tensor
        ``(R, G)`` their squared standard errors (0 where none was given).
    known : Tensor
        Bool ``(V,)``: the single was measured.
    rows : Tensor
        int64 ``(V,)``: each vocabulary entry's row (:func:`table_rows`).

    """

    effect: Tensor
    var: Tensor
    known: Tensor
    rows: Tensor

    @classmethod
    def from_measured(cls, effects: Mapping[int, Tensor], variances: Mapping[int, Tensor] | None, n_vocab: int,
                      n_genes: int, rows: Tensor | None = None) -> Singles:
        """Tables of ``{vocabulary index: Δ (G,)}`` and their squared standard errors (same keys; 0 if absent).

        ``rows``: the layout (:func:`table_rows`; default: a row for each measured single). A measured single
        without a row in ``rows`` is a ``ValueError``.
        """
        own = table_rows(effects, n_vocab)
        effect, var = torch.zeros(len(effects) + 1, n_genes), torch.zeros(len(effects) + 1, n_genes)
        known = torch.zeros(n_vocab, dtype=torch.bool)
        for i, delta in effects.items():
            effect[own[i]] = torch.as_tensor(delta, dtype=effect.dtype)
            known[i] = True
        for i, v in (variances or {}).items():
            if int(own[i]):
                var[own[i]] = torch.as_tensor(v, dtype=var.dtype)
        singles = cls(effect, var, known, own)
        return singles if rows is None else singles.relayout(rows)

    def take(self, table: Tensor, index: Tensor) -> Tensor:
        """Rows of ``table`` (``effect``, ``var`` or one in this layout) for vocabulary ``index`` (any shape, ≥ 0)."""
        return table[self.rows[index]]

    def relayout(self, rows: Tensor) -> Singles:
        """The same singles in the layout ``rows`` (every known single must have a row there, :func:`move_rows`)."""
        return Singles(move_rows(self.effect, self.known, self.rows, rows),
                       move_rows(self.var, self.known, self.rows, rows), self.known.clone(), rows)

    def mean_effect(self) -> Tensor:
        """Mean ``(G,)`` of the known single effects (zeros when none): the stand-in of an unknown single."""
        return mean_single(self.effect, self.known, self.rows)


def mean_single(effect: Tensor, known: Tensor, rows: Tensor) -> Tensor:
    """Mean ``(G,)`` of the known ``(V,)`` singles of a compact table ``effect`` ``(R, G)`` (zeros when none)."""
    return effect[rows[known]].mean(0) if bool(known.any()) else torch.zeros_like(effect[0])


@dataclass(frozen=True)
class PriorTables:
    """What the prior mean reads besides the conditions' singles (each ``None`` where the settings need none).

    Attributes
    ----------
    var : Tensor or None
        ``(R, G)`` squared standard errors of the single effects, compact rows (masking ``τ``).
    shrunk : Tensor or None
        ``(R, G)`` empirical-Bayes shrunk singles, compact rows (masking with ``denoise: eb*``, :func:`shrunk_table`).
    rule : callable or None
        The fitted combination rule ``(Δa, Δb) -> Δab`` over ``(..., G)`` (prior ``combination``, or ``blend``).
    closure : Tensor or None
        ``(2, G)`` :func:`~sciml.perturbation.nn.masking.closure_terms` (masking with ``closure``).
    rows : Tensor or None
        int64 ``(V,)`` row of each vocabulary entry in ``var`` and ``shrunk`` (:class:`Singles`).

    """

    var: Tensor | None = None
    shrunk: Tensor | None = None
    rule: Callable[[Tensor, Tensor], Tensor] | None = None
    closure: Tensor | None = None
    rows: Tensor | None = None


def shrunk_table(effect: Tensor, var: Tensor, known: Tensor, rows: Tensor, denoise: str) -> Tensor:
    """Compact singles ``effect`` ``(R, G)``, the rows of the ``known`` ``(V,)`` singles shrunk (:data:`DENOISERS`)."""
    table = effect.clone()
    at = rows[known]
    table[at] = DENOISERS[denoise](effect[at], var[at])
    return table


def own_columns(pert: Tensor, n: int) -> Tensor:
    """Bool ``(C, n)``: column ``g`` is one of the perturbed genes of the condition (``pert`` ``(C, P)``)."""
    return (torch.arange(n, device=pert.device)[None, :, None] == pert[:, None, :]).any(-1)


def condition_singles(pert: Tensor, effect: Tensor, known: Tensor, rows: Tensor,
                      stand_in: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Single effects ``(C, P, G)`` and known mask ``(C, P)`` of conditions ``pert`` ``(C, P)`` (−1: padding).

    ``effect`` ``(R, G)``, ``known`` ``(V,)`` and ``rows`` ``(V,)`` are the singles (:class:`Singles`); an unknown
    single counts as 0, or as ``stand_in`` ``(G,)`` when given (the additive fallback's stand-in).
    """
    valid = pert >= 0
    mask = valid & known[pert.clamp_min(0)]
    d = effect[rows[pert.clamp_min(0)]] * mask[..., None]
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
        int64 ``(C, P)`` vocabulary indices (−1: padding): the own columns, and through ``tables.rows`` the rows of
        its tables.
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
        shrunk = tables.shrunk[tables.rows[pert.clamp_min(0)]]
        return masking(shrunk[:, 0], shrunk[:, 1], kappa)
    tau = settings.tau
    if kappa == 0.0 and tau == 0.0 and not settings.closed:
        return None
    var = tables.var[tables.rows[pert.clamp_min(0)]]
    return masking_prior(d[:, 0], d[:, 1], var[:, 0], var[:, 1], kappa, tau)


def _combination(d: Tensor, settings: PriorSettings, tables: PriorTables) -> Tensor | None:
    """``Δa + Δb + λ·(rule − Δa − Δb)`` ``(C, G)`` of doubles ``d`` ``(C, 2, G)``; ``None`` when ``λ = 0``."""
    lam = settings.rule_weight
    if tables.rule is None or lam == 0.0:
        return None
    total = d.sum(1)
    return total + lam * (tables.rule(d[:, 0], d[:, 1]) - total)
