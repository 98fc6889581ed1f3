"""The SMILES molecules of the general Hamiltonian model's training set (sciml.hamiltonian.data.smiles).

They must stay apart from the held-out molecules (MD17 set and G2 hold-out) and from the G2 molecules already in
training, be closed-shell H/C/N/O, and embed to sane, reproducible geometries.
"""

from __future__ import annotations

import numpy as np
import pytest

from sciml.hamiltonian.data.gen_molecules import G2_ORGANIC, builtin_molecule, organic_split, resolve_molecules
from sciml.hamiltonian.data.smiles import SMILES_ORGANIC

#: MD17 molecules (issue 15: never trained on; water and ethanol may be) and thymine (uracil's scaffold)
MD17_SMILES = {"malondialdehyde": "O=CCC=O", "uracil": "O=c1cc[nH]c(=O)[nH]1", "aspirin": "CC(=O)Oc1ccccc1C(=O)O",
               "naphthalene": "c1ccc2ccccc2c1", "salicylic acid": "OC(=O)c1ccccc1O", "toluene": "Cc1ccccc1",
               "thymine": "Cc1c[nH]c(=O)[nH]c1=O"}


def _canonical(smiles: str) -> str:
    from rdkit import Chem

    return Chem.MolToSmiles(Chem.MolFromSmiles(smiles))


def _g2_canonical() -> dict[str, str]:
    """Canonical SMILES of the G2 molecules from their geometry (rdkit's bond perception)."""
    from rdkit import Chem
    from rdkit.Chem import rdDetermineBonds

    out = {}
    for name in G2_ORGANIC:
        numbers, pos = builtin_molecule(name)
        block = f"{len(numbers)}\n\n" + "".join(f"{Chem.GetPeriodicTable().GetElementSymbol(int(z))} {x} {y} {w}\n"
                                               for z, (x, y, w) in zip(numbers, pos, strict=True))
        mol = Chem.MolFromXYZBlock(block)
        try:
            rdDetermineBonds.DetermineBonds(mol, charge=0)
        except ValueError:
            continue  # carbene and other species rdkit cannot assign: not in the SMILES list either
        out[name] = Chem.MolToSmiles(Chem.RemoveHs(mol))
    return out


def test_no_held_out_or_duplicate_molecule():
    pytest.importorskip("rdkit")
    ours = {_canonical(s): n for n, s in SMILES_ORGANIC.items()}
    assert len(ours) == len(SMILES_ORGANIC), "two names for one molecule"
    held = {_canonical(s) for s in MD17_SMILES.values()}
    assert not held & set(ours)
    g2 = _g2_canonical()
    assert len(g2) > 40  # the comparison below is not empty
    clash = {ours[c] for c in set(g2.values()) & set(ours)}
    assert not clash, f"already in G2: {clash}"
    _, g2_held = organic_split()
    assert not set(g2_held) & set(resolve_molecules("smiles-organic"))


def test_geometries_are_closed_shell_sane_and_reproducible():
    pytest.importorskip("rdkit")
    for name in SMILES_ORGANIC:
        numbers, pos = builtin_molecule(name)
        assert set(numbers.tolist()) <= {1, 6, 7, 8} and int(numbers.sum()) % 2 == 0, name
        dist = np.linalg.norm(pos[:, None] - pos[None], axis=-1) + 10 * np.eye(len(pos))
        assert 0.9 < dist.min() and (dist.min(1) < 1.6).all(), name  # bonded, no clash, nothing floating
    again = builtin_molecule("paracetamol")[1]
    np.testing.assert_allclose(again, builtin_molecule("paracetamol")[1], atol=1e-10)


def test_unknown_name_lists_the_smiles_molecules():
    with pytest.raises(ValueError, match="SMILES molecules"):
        resolve_molecules("not-a-molecule")


def test_the_large_set_is_larger_than_qm9_and_apart_from_every_training_list():
    pytest.importorskip("rdkit")
    from sciml.hamiltonian.data.gen_molecules import S22_MONOMERS
    from sciml.hamiltonian.data.smiles import SMILES_LARGE

    large = {_canonical(s): n for n, s in SMILES_LARGE.items()}
    assert len(large) == len(SMILES_LARGE), "two names for one molecule"
    taken = {_canonical(s) for s in (*MD17_SMILES.values(), *SMILES_ORGANIC.values())}
    taken |= set(_g2_canonical().values())
    assert not taken & set(large)
    assert not set(S22_MONOMERS) & set(SMILES_LARGE)
    n_fluorinated = 0
    for name in resolve_molecules("smiles-large"):
        numbers, pos = builtin_molecule(name)
        assert 10 <= int((numbers > 1).sum()) <= 14, name  # QM9 stops at 9 heavy atoms
        assert set(numbers.tolist()) <= {1, 6, 7, 8, 9} and numbers.sum() % 2 == 0, name
        d = np.linalg.norm(pos[:, None] - pos[None], axis=-1) + np.eye(len(pos)) * 9
        assert d.min() > 0.9, name  # an embedded, minimised geometry
        n_fluorinated += int((numbers == 9).any())
    assert n_fluorinated >= 5
