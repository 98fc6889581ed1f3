"""Perturbation condition labels: parse GEARS and scPerturb conventions into one canonical form.

Conventions accepted (docs/design.md §3):

- GEARS: ``ctrl`` (control), ``A+ctrl`` or ``ctrl+A`` (single), ``A+B`` (double);
- scPerturb / PerturBench: a configurable control label (e.g. ``control``), ``A`` (single), ``A+B`` (double).

The canonical form of a condition is the sorted tuple of perturbed gene symbols, ``()`` for control; its
canonical *label* is written in GEARS style: ``ctrl``, ``A+ctrl``, ``A+B`` (genes sorted).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

CTRL = "ctrl"  # GEARS control label
SEP = "+"  # separator of combined perturbations
MAX_GENES = 2  # singles and doubles (the batch pads to this width)

Condition = tuple[str, ...]


class UnknownGeneError(ValueError):
    """A perturbed gene is not in the frozen gene vocabulary."""


def parse_condition(label: str, control_label: str = CTRL) -> Condition:
    """Parse one condition label into the canonical sorted tuple of gene symbols.

    Parameters
    ----------
    label : str
        ``ctrl``, the configured ``control_label``, ``A``, ``A+ctrl``, ``ctrl+A`` or ``A+B``.
    control_label : str
        Label of control cells in the data (``ctrl`` for GEARS, ``control`` for PerturBench).

    Returns
    -------
    tuple of str
        Sorted gene symbols, ``()`` for control.

    """
    text = str(label).strip()
    if text in (control_label, CTRL, ""):
        return ()
    parts = [p.strip() for p in text.split(SEP)]
    genes = [p for p in parts if p not in (CTRL, control_label)]
    if any(not g for g in genes) or not genes:
        raise ValueError(f"condition {label!r}: empty gene name; expected 'A', 'A+ctrl' or 'A+B'")
    if len(set(genes)) != len(genes):
        raise ValueError(f"condition {label!r}: the same gene appears twice")
    return tuple(sorted(genes))


def format_condition(genes: Sequence[str]) -> str:
    """Canonical GEARS-style label of a condition: ``ctrl``, ``A+ctrl`` or ``A+B`` (genes sorted)."""
    genes = sorted(genes)
    if not genes:
        return CTRL
    if len(genes) == 1:
        return f"{genes[0]}{SEP}{CTRL}"
    return SEP.join(genes)


def canonical_label(label: str, control_label: str = CTRL) -> str:
    """Normalise any accepted label to its canonical GEARS-style form (``'B+A'`` → ``'A+B'``)."""
    return format_condition(parse_condition(label, control_label))


def check_genes(genes: Iterable[str], vocabulary: Iterable[str], where: str = "condition") -> None:
    """Raise :class:`UnknownGeneError` naming every gene of ``genes`` that ``vocabulary`` lacks."""
    vocab = set(vocabulary)
    missing = sorted(set(genes) - vocab)
    if missing:
        shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
        raise UnknownGeneError(f"{where}: unknown gene(s) {shown} (not in the model's gene vocabulary of "
                               f"{len(vocab)} genes); use genes the model was trained with")


def gene_indices(condition: Condition, vocabulary: dict[str, int], width: int = MAX_GENES) -> list[int]:
    """Indices of a condition's genes in ``vocabulary``, padded with -1 to ``width``.

    Raises :class:`UnknownGeneError` for a gene not in the vocabulary, ``ValueError`` for more than
    ``width`` genes.
    """
    check_genes(condition, vocabulary, where=f"condition {format_condition(condition)!r}")
    if len(condition) > width:
        raise ValueError(f"condition {format_condition(condition)!r} perturbs {len(condition)} genes; "
                         f"at most {width} are supported")
    return [vocabulary[g] for g in condition] + [-1] * (width - len(condition))
