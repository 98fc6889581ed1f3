"""Chemical domain of a molecule model by rule: the elements and molecule sizes of its training molecules.

Recorded at export in ``metadata.json`` as ``training_domain`` (:func:`training_domain`, from the *train* split:
the molecules the network and the ridge were fitted on) and stated in the model card (:func:`card_lines`)::

    {"elements": [1, 6, 7, 8], "n_molecules": 59, "n_structures": 321,
     "n_atoms": [3, 24], "n_heavy_atoms": [1, 10]}      # [min, max] over the train split; heavy = not H

Elements outside the trained orbital basis are refused before any pyscf work
(:func:`sciml.hamiltonian.inputs.check_elements`). A molecule with more atoms or more heavy atoms than every
training molecule is predicted but marked out of domain (:meth:`TrainingDomain.beyond`): size extrapolation is
what the domain p-value can miss (its embedding pools per pair type, so a longer chain of familiar groups can look
typical), and a molecule larger than all ``n`` train molecules is, for exchangeable molecules, an event of
probability at most ``1/(n + 1)``; the flag thus adds little to the false-alarm rate of the p-value test.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["KEY", "TrainingDomain", "card_lines", "training_domain"]

KEY = "training_domain"  # metadata.json key


def _span(lo_hi: tuple[int, int]) -> str:
    return str(lo_hi[0]) if lo_hi[0] == lo_hi[1] else f"{lo_hi[0]}–{lo_hi[1]}"


def _heavy(numbers) -> int:
    return int((np.asarray(numbers) > 1).sum())


@dataclass(frozen=True)
class TrainingDomain:
    """Elements and ``[min, max]`` molecule sizes of a model's training molecules (module docstring)."""

    elements: tuple[int, ...]
    n_molecules: int
    n_structures: int
    n_atoms: tuple[int, int]
    n_heavy_atoms: tuple[int, int]

    def beyond(self, numbers) -> str | None:
        """Note for a molecule (atomic numbers ``(n,)``) larger than every training molecule; None otherwise."""
        n, heavy = len(numbers), _heavy(numbers)
        if n <= self.n_atoms[1] and heavy <= self.n_heavy_atoms[1]:
            return None
        return (f"larger than every training molecule ({n} atoms, {heavy} heavy; trained on {_span(self.n_atoms)} "
                f"atoms, {_span(self.n_heavy_atoms)} heavy): size extrapolation, out of domain, the intervals carry no "
                "coverage guarantee")

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (``metadata.json``'s ``training_domain``)."""
        return {"elements": list(self.elements), "n_molecules": self.n_molecules, "n_structures": self.n_structures,
                "n_atoms": list(self.n_atoms), "n_heavy_atoms": list(self.n_heavy_atoms)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainingDomain:
        """Rebuild from :meth:`to_dict`; ``ValueError`` naming the field on anything malformed."""
        keys = {"elements", "n_molecules", "n_structures", "n_atoms", "n_heavy_atoms"}
        if not isinstance(d, Mapping) or set(d) != keys:
            raise ValueError(f"{KEY} must hold exactly {sorted(keys)}")

        def ints(name: str, length: int | None = None) -> tuple[int, ...]:
            v = d[name] if isinstance(d[name], list) else [d[name]]
            if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v) or \
                    (length is not None and len(v) != length):
                raise ValueError(f"{KEY}.{name} must be {length or 'a list of'} non-negative integer(s), "
                                 f"got {d[name]!r}")
            return tuple(v)

        atoms, heavy = ints("n_atoms", 2), ints("n_heavy_atoms", 2)
        if atoms[0] > atoms[1] or heavy[0] > heavy[1] or heavy[1] > atoms[1]:
            raise ValueError(f"{KEY}: n_atoms {list(atoms)} and n_heavy_atoms {list(heavy)} must be [min, max] "
                             "ranges with no more heavy atoms than atoms")
        return cls(ints("elements"), ints("n_molecules", 1)[0], ints("n_structures", 1)[0], atoms, heavy)


def training_domain(molecules: Iterable[tuple[str, Any]]) -> TrainingDomain:
    """The :class:`TrainingDomain` of ``(molecule name, atomic numbers (n,))`` pairs (one per structure)."""
    seen = list(molecules)
    if not seen:
        raise ValueError("no training structures to take the chemical domain from")
    sizes = np.array([(len(z), _heavy(z)) for _, z in seen])
    elements = sorted({int(x) for _, z in seen for x in np.asarray(z)})
    return TrainingDomain(tuple(elements), len({name for name, _ in seen}), len(seen),
                          (int(sizes[:, 0].min()), int(sizes[:, 0].max())),
                          (int(sizes[:, 1].min()), int(sizes[:, 1].max())))


def card_lines(dom: TrainingDomain) -> list[str]:
    """Body of the model card's ``## Chemical domain`` section."""
    from ase.data import chemical_symbols

    symbols = ", ".join(chemical_symbols[z] for z in dom.elements)
    others = ", ".join([chemical_symbols[z] for z in (6, 7, 8, 9, 15, 16, 17) if z not in dom.elements][:4])
    return [f"- Elements: {symbols} (the only ones in the training data; a molecule with any other element, e.g. "
            f"{others}, is refused before any pyscf work with a one-line error naming the file, the "
            "element and the shipped model that covers it, if any)",
            f"- Sizes: {_span(dom.n_atoms)} atoms, {_span(dom.n_heavy_atoms)} heavy "
            f"(non-H) atoms over the {dom.n_molecules} training molecule(s) ({dom.n_structures} train structures); "
            "a larger molecule is predicted but marked `in_domain: false` with a note (size extrapolation; its "
            "intervals carry no guarantee), whatever its domain p-value"]
