"""Typed molecule results (sciml.hamiltonian.results), the writer (sciml.hamiltonian.write), the chunking and the
closed-shell check: no pyscf, no model (a 3-atom water layout with random matrices)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from sciml.hamiltonian.chunks import Prepared, chunks
from sciml.hamiltonian.orbitals import OrbitalLayout
from sciml.hamiltonian.results import MoleculePrediction, RefineRecord
from sciml.hamiltonian.scf.molecule import ZerothStep, check_closed_shell
from sciml.hamiltonian.scf.residual import ResidualBound, check_residual
from sciml.hamiltonian.structure import HamiltonianStructure
from sciml.hamiltonian.units import HARTREE_EV
from sciml.hamiltonian.write import summary, write_prediction

LAYOUT = OrbitalLayout({8: (0, 0, 0, 1, 1, 2), 1: (0, 0, 1)})
NUMBERS = np.array([8, 1, 1])
POS = np.array([[0.0, 0.0, 0.117], [0.0, 0.757, -0.469], [0.0, -0.757, -0.469]])


def _symmetric(rng, n=24, scale=1.0):
    a = rng.normal(scale=scale, size=(n, n))
    return (a + a.T) / 2


def _prediction(**changes) -> MoleculePrediction:
    eps = np.array([-20.0, -1.0, -0.6, -0.5, -0.4, 0.1, 0.2, 0.5])
    fields = dict(source="w.xyz", hamiltonian=_symmetric(np.random.default_rng(0)), orbital_energies=eps,
                  lower=eps - 0.01, upper=eps + 0.02, n_occupied=5, alpha=0.1, domain_pvalue=0.3, in_domain=True,
                  domain_beta=0.05, intervals="split conformal, Mondrian by orbital", interval_guarantee=True)
    return MoleculePrediction(**(fields | changes))


def test_gap_is_the_bonferroni_combination_and_absent_without_a_virtual_orbital():
    res = _prediction()
    gap = res.gap
    assert gap.homo == -0.4 and gap.lumo == 0.1 and gap.gap == pytest.approx(0.5)
    assert gap.lower == pytest.approx(0.09 - (-0.38)) and gap.upper == pytest.approx(0.12 - (-0.41))
    assert res.homo == -0.4
    eps = res.orbital_energies[:5]
    assert _prediction(orbital_energies=eps, lower=eps, upper=eps).gap is None


def test_with_note_joins_notes_and_replaces_fields():
    res = _prediction()
    assert res.with_note("a").note == "a" and res.with_note("a").with_note("b").note == "a; b"
    assert res.with_note("").note == "" and res.with_note("", n_occupied=4).n_occupied == 4
    assert res.note == ""  # frozen: copies only


def test_summary_holds_every_field_in_hartree_and_ev_in_file_order():
    rec = RefineRecord(2, [700.0, 40.0], np.full(8, 1e-4))
    res = _prediction(refined=rec, note="refined by 2 Fock builds")
    row = summary(res, "out/w", SimpleNamespace(basis="def2-svp", xc="pbe"))
    assert list(row) == ["source", "folder", "n_occupied", "alpha", "basis", "xc", "orbital_energies_hartree",
                         "lower_hartree", "upper_hartree", "orbital_energies_ev", "lower_ev", "upper_ev", "homo_ev",
                         "domain_pvalue", "in_domain", "domain_beta", "intervals", "interval_guarantee", "note",
                         "refine_steps", "refine_method", "refine_residuals_microhartree", "refine_last_change_hartree",
                         "lumo_ev",
                         "gap_ev", "gap_lower_ev", "gap_upper_ev"]
    assert row["orbital_energies_hartree"] == res.orbital_energies.tolist()
    assert row["gap_ev"] == res.gap.gap * HARTREE_EV and row["homo_ev"] == -0.4 * HARTREE_EV
    assert row["refine_steps"] == 2 and row["refine_residuals_microhartree"] == [700.0, 40.0]
    assert row["refine_method"] == "newton"
    assert "scf_residual_microhartree" not in row
    check = check_residual(100.0, ResidualBound.fit({f"m{i}": [0.1 * i] for i in range(1, 10)}, 0.1), None)
    assert check.bound == pytest.approx(90.0) and check.alpha == 0.1 and "H MAE <= 90" in check.text
    row = summary(_prediction(residual=check), "out/w", SimpleNamespace(basis="b", xc="x"))
    assert row["scf_residual_microhartree"] == 100.0 and row["h_mae_bound_alpha"] == 0.1
    assert check_residual(5.0, None, 0.1) == type(check)(5.0)  # no residual.json: the residual alone
    json.dumps(row)  # JSON-ready: plain floats, lists, None


def test_write_prediction_writes_matrices_deeph_and_summary(tmp_path):
    rng = np.random.default_rng(1)
    s, h0, h = np.eye(24) + _symmetric(rng, scale=0.01), _symmetric(rng), _symmetric(rng)
    structure = HamiltonianStructure.from_dense(NUMBERS, POS, {"H0": h0, "S": s}, LAYOUT, {"source": "w.xyz"})
    reference = LAYOUT.to_pyscf(h, NUMBERS) + 1e-3
    item = Prepared("w", structure, ZerothStep(h0, s, 5), reference)
    predictor = SimpleNamespace(layout=LAYOUT, basis="def2-svp", xc="pbe", path=tmp_path / "model")
    written = write_prediction(tmp_path / "out" / "w", item, _prediction(hamiltonian=h), predictor)
    folder = written.folder
    assert written.plot is None and written.prediction.source == "w.xyz"
    np.testing.assert_allclose(np.load(folder / "hamiltonian.npy"), LAYOUT.to_pyscf(h, NUMBERS), atol=0)
    np.testing.assert_allclose(np.load(folder / "overlap.npy"), s, atol=0)
    for name in ("hamiltonians.h5", "overlaps.h5", "hamiltonians_0.h5", "info.json"):
        assert (folder / "deeph" / name).is_file()
    row = json.loads((folder / "eigenvalues.json").read_text())
    assert row["h_mae_microhartree"] == pytest.approx(1e3) and len(row["reference_orbital_energies_ev"]) == 8


def _item(n_atoms: int, mb: float = 0.0) -> Prepared:
    fock = None if mb == 0 else SimpleNamespace(nbytes=mb * 1e6)
    structure = SimpleNamespace(numbers=np.ones(n_atoms))
    return Prepared(f"m{n_atoms}", structure, ZerothStep(None, None, 1, fock))


def test_chunks_close_on_count_pairs_and_solver_memory():
    sizes = lambda groups: [[len(it.structure.numbers) for it in g] for g in groups]  # noqa: E731
    items = [_item(3), _item(3), _item(3), _item(10), _item(3)]
    assert sizes(chunks(items, 2, 1e9, 0.0)) == [[3, 3], [3, 10], [3]]
    assert sizes(chunks(items, 16, 30, 0.0)) == [[3, 3, 3], [10], [3]]  # 27 + 100 pairs > 30: 10 goes alone
    held = [_item(3, 400.0), _item(3, 400.0), _item(3, 400.0)]
    assert sizes(chunks(held, 16, 1e9, 1000.0)) == [[3, 3], [3]]


@pytest.mark.parametrize(("numbers", "odd"), [([6, 1, 1, 1], True), ([7, 8], True), ([8, 1, 1], False)])
def test_open_shell_molecules_are_refused_naming_the_file(numbers, odd):
    if odd:
        with pytest.raises(ValueError, match=r"^mol\.xyz: \d+ electrons, an odd count .*closed-shell"):
            check_closed_shell(numbers, "mol.xyz")
    else:
        assert check_closed_shell(numbers, "mol.xyz") == 5
