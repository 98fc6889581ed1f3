"""The G2 organic molecule set, its seeded molecule-level hold-out, and group splits."""

from __future__ import annotations

import numpy as np
import pytest

from sciml.core.splits import group_split
from sciml.hamiltonian.data.gen_molecules import (
    G2_ORGANIC,
    MD17_HOLDOUT,
    S22_MONOMERS,
    builtin_molecule,
    molecule_seed,
    organic_split,
    resolve_molecules,
)


def test_holdout_is_disjoint_seeded_and_keeps_md17_out_of_training():
    train, held = organic_split()
    assert set(train).isdisjoint(held) and sorted(train + held) == sorted(G2_ORGANIC)
    assert len(held) == 8 and organic_split() == (train, held) and organic_split(seed=1)[1] != held
    assert {"H2O", "CH3CH2OH"} <= set(train)
    assert set(MD17_HOLDOUT).isdisjoint(resolve_molecules("g2-train"))
    assert resolve_molecules("g2-holdout,md17-holdout,uracil") == held + list(MD17_HOLDOUT)


@pytest.mark.parametrize("name", ["C6H6", "CH3NO2", "trans-butane", *S22_MONOMERS])
def test_g2_molecules_are_closed_shell_hcno(name):
    numbers, pos = builtin_molecule(name)
    assert set(numbers.tolist()) <= {1, 6, 7, 8} and numbers.sum() % 2 == 0 and pos.shape == (len(numbers), 3)
    d = np.linalg.norm(pos[:, None] - pos[None], axis=-1) + 10 * np.eye(len(pos))
    assert 0.7 < d.min() < 1.6  # bonded, no duplicated atoms


def test_molecule_seeds_differ_per_molecule_and_repeat():
    assert molecule_seed(11, "CH4") == molecule_seed(11, "CH4") != molecule_seed(11, "NH3")
    assert molecule_seed(11, "CH4") != molecule_seed(12, "CH4")


def test_group_split_keeps_groups_whole():
    groups = [f"m{k % 7}" for k in range(40)]
    split = group_split(groups, [0.5, 0.2, 0.3, 0.0], seed=0)
    seen = {}
    for name, idx in split.items():
        for i in idx:
            assert seen.setdefault(groups[i], name) == name
    assert sorted(np.concatenate(list(split.values())).tolist()) == list(range(40))
    assert len({groups[i] for i in split["train"]}) == 4  # round(0.5 * 7) groups
    again = group_split(groups, [0.5, 0.2, 0.3, 0.0], seed=0)
    assert all(np.array_equal(split[k], again[k]) for k in split)


def test_s22_monomers_are_whole_molecules_and_not_the_md17_scaffold():
    """Each monomer is one connected molecule (no atom of its partner), and neither uracil nor thymine is offered."""
    formulas = {}
    for name in resolve_molecules("s22-monomers"):
        numbers, pos = builtin_molecule(name)
        bonded = np.linalg.norm(pos[:, None] - pos[None], axis=-1) < 1.7
        reach = bonded.copy()
        for _ in range(len(numbers)):
            reach = (reach.astype(int) @ bonded.astype(int)) > 0
        assert reach.all(), name  # connected: the partner monomer (>= 1.7 Å away) is not included
        formulas[name] = tuple(np.bincount(numbers, minlength=9)[[1, 6, 7, 8]])
    assert formulas["indole"] == (7, 8, 1, 0) and formulas["2-pyridone"] == (5, 5, 1, 1)
    assert (4, 4, 2, 2) not in formulas.values() and (6, 5, 2, 2) not in formulas.values()  # uracil, thymine
