"""Chemical domain by rule (:mod:`sciml.hamiltonian.sizes`): sizes of the training molecules, the size flag, the
metadata round trip and its one-line errors. No pyscf, no model."""

from __future__ import annotations

import numpy as np
import pytest

from sciml.hamiltonian.sizes import TrainingDomain, card_lines, training_domain

WATER, METHANOL, H2 = [8, 1, 1], [6, 8, 1, 1, 1, 1], [1, 1]


def test_training_domain_spans_the_train_molecules():
    dom = training_domain([("water", WATER), ("water", WATER), ("methanol", np.array(METHANOL)), ("h2", H2)])
    assert dom == TrainingDomain((1, 6, 8), 3, 4, (2, 6), (0, 2))
    assert TrainingDomain.from_dict(dom.to_dict()) == dom
    with pytest.raises(ValueError, match="no training structures"):
        training_domain([])


def test_only_molecules_larger_than_every_training_molecule_are_flagged():
    dom = training_domain([("water", WATER), ("methanol", METHANOL)])
    assert dom.beyond(WATER) is None and dom.beyond(METHANOL) is None and dom.beyond(H2) is None
    note = dom.beyond([6, 6, 1, 1, 1, 1, 1, 1])  # ethane: 8 atoms > 6
    assert note.startswith("larger than every training molecule (8 atoms, 2 heavy; trained on 3–6 atoms, 1–2 heavy)")
    assert "out of domain" in note
    assert dom.beyond([6, 6, 8]) is not None  # 3 atoms, but 3 heavy atoms > 2
    single = training_domain([("water", WATER)])
    assert "trained on 3 atoms, 1 heavy" in single.beyond(WATER * 2)


@pytest.mark.parametrize(("change", "field"), [
    ({"n_atoms": [5, 2]}, "n_atoms"), ({"n_heavy_atoms": [0, 9]}, "n_heavy_atoms"),
    ({"elements": [1, "C"]}, "elements"), ({"n_molecules": -1}, "n_molecules"), ({"n_atoms": [3]}, "n_atoms"),
    ({"extra": 1}, "exactly")])
def test_malformed_training_domain_is_a_one_line_error_naming_the_field(change, field):
    d = training_domain([("water", WATER), ("methanol", METHANOL)]).to_dict() | change
    with pytest.raises(ValueError, match=field) as err:
        TrainingDomain.from_dict(d)
    assert len(str(err.value).splitlines()) == 1


def test_card_states_elements_sizes_and_what_happens_outside():
    lines = card_lines(training_domain([("water", WATER), ("methanol", METHANOL)]))
    assert lines[0].startswith("- Elements: H, C, O (") and "e.g. N, F, P, S" in lines[0] and "refused" in lines[0]
    assert lines[1].startswith("- Sizes: 3–6 atoms, 1–2 heavy (non-H) atoms over the 2 training molecule(s)")
    assert "`in_domain: false`" in lines[1]
