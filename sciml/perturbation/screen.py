r"""What a screen measured, read from its data module once: singles, doubles, control mean, closure.

:func:`read_screen` collects what building the flow model needs from the data
(:func:`sciml.perturbation.task.build`): the single effects of the training split with their squared standard
errors (:class:`~sciml.perturbation.prior.Singles`), the training and val doubles whose two singles are known
(:class:`Doubles`, what the prior's choices in :mod:`sciml.perturbation.select` score), the training doubles the
combination rule is fitted on, the control mean and the closure terms of closed data. The prior's choices then
read this value, never the data module.

The squared standard error of a mean effect against its controls is ``var(cells)/n + var(controls)/n_ctrl``
(:func:`mean_variance` of each).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from sciml.perturbation.data.table import split_key
from sciml.perturbation.nn.masking import closure_terms
from sciml.perturbation.prior import Singles, table_rows

__all__ = ["Doubles", "Screen", "data_closure", "mean_variance", "read_doubles", "read_screen", "single_effects",
           "single_variances", "training_doubles"]


def mean_variance(x: np.ndarray) -> np.ndarray:
    """Squared standard error ``(G,)`` of the column means of ``x`` ``(n, G)`` (0 for a single row)."""
    return x.var(axis=0, ddof=1) / len(x) if len(x) > 1 else np.zeros(x.shape[1])


@dataclass(frozen=True)
class Doubles:
    """Double perturbations measured against their controls, stacked (``D`` of them, ``G`` genes, float32).

    Attributes
    ----------
    keys : tuple of str
        The data module's condition keys.
    pert : Tensor
        int64 ``(D, 2)`` vocabulary indices of the two genes.
    mu0, target : Tensor
        ``(D, G)`` mean of each double's control cells and of its perturbed cells.
    delta : Tensor
        ``(D, G)`` mean effect ``target − mu0`` (taken in the data's precision).
    var : Tensor
        ``(D, G)`` squared standard error of ``delta``.

    """

    keys: tuple[str, ...]
    pert: Tensor
    mu0: Tensor
    target: Tensor
    delta: Tensor
    var: Tensor

    def __len__(self) -> int:
        return len(self.keys)

    def take(self, index: Sequence[int]) -> Doubles:
        """The doubles at positions ``index``, in that order."""
        i = torch.as_tensor(list(index), dtype=torch.long)
        return Doubles(tuple(self.keys[j] for j in index), self.pert[i], self.mu0[i], self.target[i], self.delta[i],
                       self.var[i])

    def __add__(self, other: Doubles) -> Doubles:
        """These doubles, then ``other``'s."""
        if not len(other) or not len(self):
            return other if not len(self) else self
        return Doubles(self.keys + other.keys, *(torch.cat([getattr(self, n), getattr(other, n)])
                                                 for n in ("pert", "mu0", "target", "delta", "var")))


def read_doubles(dm, keys: Sequence[str]) -> Doubles:
    """:class:`Doubles` of the conditions ``keys`` of data module ``dm`` (each against its own controls).

    One condition's cells are dense at a time.
    """
    stats: dict[str, list[np.ndarray]] = {"mu0": [], "target": [], "delta": [], "var": []}
    for key in keys:
        x, (mu0, c_var) = dm.cells(key), dm.control_moments(key)
        for name, value in (("mu0", mu0), ("target", x.mean(0)), ("delta", x.mean(0) - mu0),
                            ("var", mean_variance(x) + c_var)):
            stats[name].append(value)

    def stack(rows: list[np.ndarray]) -> Tensor:
        return torch.as_tensor(np.stack(rows), dtype=torch.float32) if rows else torch.zeros(0, 0)

    return Doubles(tuple(keys), torch.tensor([dm.encode(k) for k in keys], dtype=torch.long).reshape(-1, 2),
                   *(stack(stats[name]) for name in ("mu0", "target", "delta", "var")))


def single_effects(dm) -> dict[int, Tensor]:
    """``{vocabulary index: mean effect (G,)}`` of the single perturbations in the training split.

    The additive baseline's singles (:class:`~sciml.perturbation.baselines.simple.Additive`): a gene perturbed alone
    in several cell types gets the mean of its effects over them (each against its own cell type's controls), the
    baseline's stand-in for a cell type it was not measured in.
    """
    from sciml.perturbation.baselines.simple import Additive

    index = {g: i for i, g in enumerate(dm.perturbation_genes)}
    return {index[g]: torch.as_tensor(d, dtype=torch.float32) for g, d in Additive().fit(dm).gene_delta.items()}


def single_variances(dm) -> dict[int, Tensor]:
    """``{vocabulary index: squared standard error (G,)}`` of each :func:`single_effects` entry.

    Per cell type ``var(cells)/n + var(controls)/n_ctrl``; a gene measured in ``k`` cell types (its effect the mean
    over them) gets the sum over them divided by ``k²``. A condition of one cell has no variance estimate (0).
    """
    from sciml.perturbation.baselines.simple import by_single_gene

    per_gene = by_single_gene(dm, dm.conditions["train"],
                              lambda key: mean_variance(dm.cells(key)) + dm.control_moments(key)[1])
    index = {g: i for i, g in enumerate(dm.perturbation_genes)}
    return {index[g]: torch.as_tensor(np.sum(v, axis=0) / len(v) ** 2, dtype=torch.float32)
            for g, v in per_gene.items()}


def training_doubles(dm) -> list[tuple[int, int, Tensor]]:
    """``(index a, index b, mean effect (G,))`` of every double perturbation in the training split."""
    keys = [key for key in dm.conditions["train"] if len(dm.perturbation(key)) == 2]
    doubles = read_doubles(dm, keys)
    return [(int(a), int(b), delta) for (a, b), delta in zip(doubles.pert.tolist(), doubles.delta, strict=True)]


def data_closure(dm) -> Tensor | None:
    """:func:`~sciml.perturbation.nn.masking.closure_terms` of the control cells; ``None`` when not closed.

    Closed: one control population (a screen of one cell type; with several, each has its own control mean) whose
    cells all have the same ``Σ_g expm1(x_g)`` (every measured gene kept after normalising to a fixed total).
    """
    cell_types = {split_key(key)[1] for keys in dm.conditions.values() for key in keys}
    if len(cell_types) > 1:
        return None
    return closure_terms(torch.as_tensor(dm.control_matrix()))


@dataclass(frozen=True)
class Screen:
    """What the flow model is built from (module docstring).

    Attributes
    ----------
    singles : Singles
        Training singles (effects, squared standard errors, known; a row per gene perturbed in training).
    doubles : dict
        ``"train"`` and ``"val"``: :class:`Doubles` whose two singles are known (what the prior's choices score).
    rule_doubles : list
        Every training double ``(a, b, Δ)``, what the combination rule is fitted on (:func:`training_doubles`).
    ctrl_mean : Tensor
        ``(G,)`` mean of all control cells (float32).
    closure : Tensor or None
        ``(2, G)`` :func:`data_closure` terms; ``None`` when the data are not closed.
    perturbed_genes : list of str
        Genes perturbed (alone or in a combination) in the training split, sorted.

    """

    singles: Singles
    doubles: dict[str, Doubles]
    rule_doubles: list[tuple[int, int, Tensor]]
    ctrl_mean: Tensor
    closure: Tensor | None
    perturbed_genes: list[str]


def read_screen(dm) -> Screen:
    """The :class:`Screen` of a set-up data module (training split for the singles and the rule, val too)."""
    effects, variances = single_effects(dm), single_variances(dm)
    doubles = {split: read_doubles(dm, double_keys(dm, set(effects), split)) for split in ("train", "val")}
    rule_doubles = training_doubles(dm)
    ctrl_mean = torch.as_tensor(dm.control_moments()[0], dtype=torch.float32)
    perturbed = sorted({g for key in dm.conditions["train"] for g in dm.perturbation(key)})
    closure = data_closure(dm)
    vocab = {g: i for i, g in enumerate(dm.perturbation_genes)}
    rows = table_rows([vocab[g] for g in perturbed], len(vocab))  # the model's layout (PerturbationModel.rows)
    singles = Singles.from_measured(effects, variances, len(vocab), len(dm.genes), rows)
    return Screen(singles, doubles, rule_doubles, ctrl_mean, closure, perturbed)


def double_keys(dm, known: Tensor | set[int], split: str) -> list[str]:
    """The doubles of ``dm.conditions[split]`` whose two singles are ``known`` (bool ``(V,)``, or a set of indices)."""
    def has(i: int) -> bool:
        return i in known if isinstance(known, set) else bool(known[i])

    return [key for key in dm.conditions[split]
            if len(dm.perturbation(key)) == 2 and all(has(i) for i in dm.encode(key))]
