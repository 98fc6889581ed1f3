"""A declared domain wider than the training set: ``fit_domain(extra=...)`` and ``export.read_extra``.

Synthetic molecules of ``test_hamiltonian_domain`` (no pyscf, no shared data): training conformers displaced by
σ = 0.05, "broad" ones by σ drawn uniformly in [0, 0.15] per conformer. The flag-rate and coverage bounds are
the conformal ones for a fresh input drawn like the calibration set (the mixture of training-like and extra
structures in its proportions): rate <= ⌊β(n+1)⌋/(n+1) and coverage >= 1 − α, within 4 binomial standard
deviations of the fresh sample plus 0.02 for the spread of one calibration draw (as in test_hamiltonian_domain).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from sciml.hamiltonian.data.datamodule import bases, collate, structure_to_sample
from sciml.hamiltonian.data.npz import write_npz
from sciml.hamiltonian.domain import fit_domain, orbital_groups, structure_errors
from sciml.hamiltonian.embed import h0_embedding
from sciml.hamiltonian.export import read_extra
from sciml.uq import MondrianConformal
from tests.unit.test_hamiltonian_domain import BASE, LAYOUT, _dm, _Module, matrices, molecule

BETA, ALPHA = 0.05, 0.1


def structures(n: int, sigma_max: float, seed: int, sigma: float | None = None):
    """``n`` conformers, σ uniform in [0, sigma_max] per conformer (or fixed ``sigma``)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        s = sigma if sigma is not None else rng.uniform(0, sigma_max)
        pos = BASE + rng.normal(scale=s, size=(3, 3))
        h0, ov = matrices(pos, rng, 1e-6)
        out.append(molecule(pos, h0, ov, h=h0))
    return out


def samples(mols):
    nb, eb = bases(LAYOUT)
    return [structure_to_sample(m, LAYOUT, nb, eb) for m in mols]


def data_module(seed: int = 0) -> SimpleNamespace:
    data = _dm(260, 0.05, seed)
    return SimpleNamespace(datasets={"train": data[:200], "calib": data[200:]}, collate_fn=collate)


def mixture(n: int, p_extra: float, seed: int):
    """Fresh inputs drawn like the calibration set: broad with probability ``p_extra``, else training-like."""
    rng = np.random.default_rng(seed)
    n_x = int(rng.binomial(n, p_extra))
    return samples(structures(n_x, 0.15, seed + 1) + structures(n - n_x, 0, seed + 2, sigma=0.05))


def bound(rate: float, n: int) -> float:
    return rate + 4 * np.sqrt(rate * (1 - rate) / n) + 0.02


def test_extra_structures_widen_the_domain_and_keep_the_flag_rate():
    module = _Module().eval()
    dm, extra = data_module(), samples(structures(300, 0.15, 11))
    narrow = fit_domain(module, dm, beta=BETA)
    wide = fit_domain(module, dm, beta=BETA, extra=extra, extra_holdout=0.5)
    # bookkeeping: 150 extra in the reference, 150 in the domain calibration and in the interval calibration
    assert wide.score.n_calib == narrow.score.n_calib + 150
    assert wide.score.reference.shape[0] == narrow.score.reference.shape[0] + 150
    assert len(wide.shift_emb) == 60 + 150
    assert len(wide.shift_scores) == len(wide.shift_groups) == 210 * 6  # 3 occupied + 3 virtual orbitals each
    nb, eb = bases(LAYOUT)
    broad = h0_embedding(collate(samples(structures(300, 0.15, 21))), nb, eb)
    flagged_narrow = float((narrow.pvalue(broad) <= BETA).double().mean())
    flagged_wide = float((wide.pvalue(broad) <= BETA).double().mean())
    assert flagged_narrow > 2 * flagged_wide  # the narrow calibration flags broad inputs the wide one accepts
    # validity: an input drawn like the domain-calibration set is flagged with probability <= beta
    n_cal = wide.score.n_calib
    fresh = h0_embedding(collate(mixture(400, 150 / n_cal, 31)), nb, eb)
    expect = np.floor(BETA * (n_cal + 1)) / (n_cal + 1)
    assert float((wide.pvalue(fresh) <= BETA).double().mean()) <= bound(expect, 400)
    # inputs far outside the declared domain (σ = 4x its largest) are still flagged
    far = h0_embedding(collate(_dm(50, 0.6, 98)), nb, eb)
    assert float((wide.pvalue(far) <= BETA).double().mean()) >= 0.9


def test_extra_structures_calibrate_the_intervals():
    module = _Module().eval()
    dm = data_module(1)
    dom = fit_domain(module, dm, beta=BETA, extra=samples(structures(300, 0.15, 12)), extra_holdout=0.5, seed=1)
    cal = MondrianConformal(score="normalized", alpha=ALPHA).fit(dom.shift_scores, dom.shift_groups)
    batch = collate(mixture(400, 150 / 210, 41))  # drawn like the interval calibration set (60 calib, 150 extra)
    emb, eps, y = structure_errors(module, batch)
    rows = torch.repeat_interleave(torch.arange(batch.num_graphs), batch.n_eig)
    iv = cal.predict_set(eps, orbital_groups(batch.n_eig, batch.n_occ), dom.sigma(emb)[rows], ALPHA)
    ok = ((y >= iv.lower) & (y <= iv.upper)).double()
    assert float(ok.mean()) >= 1 - bound(ALPHA, batch.num_graphs)  # a molecule's orbitals are dependent


def test_extra_holdout_is_checked():
    with pytest.raises(ValueError, match="extra_holdout"):
        fit_domain(_Module().eval(), data_module(), extra=samples(structures(10, 0.1, 3)), extra_holdout=0.0)


def _dm_with_meta(seed: int = 0) -> SimpleNamespace:
    nb, eb = bases(LAYOUT)
    dm = data_module(seed)
    dm.meta, dm.layout, dm.path = {"basis": "def2-svp", "xc": "pbe", "h0": "full"}, LAYOUT, "train.npz"
    dm.sample = lambda s: structure_to_sample(s, LAYOUT, nb, eb)
    return dm


def _write(path, mols, **meta):
    for m in mols:
        m.meta |= {"basis": "def2-svp", "xc": "pbe"} | meta
    return write_npz(path, mols, LAYOUT)


def test_read_extra_reads_checks_and_records(tmp_path):
    dm = _dm_with_meta()
    good = _write(tmp_path / "broad.npz", structures(7, 0.1, 5))
    got, records = read_extra(dm, [good])
    assert len(got) == 7 and records[0]["file"] == "broad.npz" and records[0]["n"] == 7
    assert len(records[0]["sha256"]) == 64
    ref = samples(structures(7, 0.1, 5))
    assert all(torch.allclose(a["x_node"], b["x_node"], atol=1e-12) for a, b in zip(got, ref, strict=True))
    other = _write(tmp_path / "hf.npz", structures(3, 0.1, 6), xc="hf")
    with pytest.raises(ValueError, match="xc hf but the model was trained on pbe"):
        read_extra(dm, [other])


def test_read_extra_refuses_training_conformers(tmp_path):
    dm = _dm_with_meta()
    train_pos = dm.datasets["train"][0]["pos"].numpy()
    h0, ov = matrices(train_pos, np.random.default_rng(0), 0.0)
    dup = _write(tmp_path / "dup.npz", [molecule(train_pos, h0, ov)] + structures(2, 0.1, 8))
    with pytest.raises(ValueError, match="1 conformer.*in the training data set"):
        read_extra(dm, [dup])
