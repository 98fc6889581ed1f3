"""Domain embedding, domain test, per-orbital normalised intervals and shift-aware thresholds of molecule models.

Synthetic molecules (no pyscf, no shared data): random symmetric H0 and S, rotated as ``D M Dᵀ`` with exact Wigner
matrices, atoms permuted with their AO blocks. Tolerances: the embedding is built from the same ``0e`` components
of the same blocks, so rotation/permutation/translation change it only by float64 round-off (~1e-13 relative);
1e-10 leaves margin. Calibration tests: exchangeable draws, flag rate within 4 binomial standard deviations.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from sciml.hamiltonian.data.datamodule import bases, collate, structure_to_sample
from sciml.hamiltonian.domain import HamiltonianDomain, fit_domain, orbital_groups, pool_deep_groups
from sciml.hamiltonian.embed import embedding_dim, h0_embedding
from sciml.hamiltonian.orbitals import OrbitalLayout, block_wigner
from sciml.hamiltonian.shift import shift_thresholds
from sciml.hamiltonian.structure import HamiltonianStructure
from sciml.testing import random_orthogonal

LAYOUT = OrbitalLayout({8: (0, 0, 1, 2), 1: (0, 1)})
NUMBERS = np.array([8, 1, 1])
BASE = np.array([[0.0, 0.0, 0.1], [0.0, 0.78, -0.45], [0.05, -0.74, -0.47]])


def molecule(pos, h0, s, numbers=NUMBERS, h=None):
    return HamiltonianStructure.from_dense(numbers, pos, {"H0": h0, "S": s, "H": h0 if h is None else h}, LAYOUT,
                                           meta={"n_occupied": 3}, order="e3nn")


def matrices(pos, rng, noise=0.0):
    """A smooth function of the geometry (so nearby geometries have nearby H0) plus optional noise."""
    n = int(LAYOUT.atom_offsets(NUMBERS)[-1])
    off = LAYOUT.atom_offsets(NUMBERS)
    h0 = np.zeros((n, n))
    for a in range(3):
        for b in range(3):
            d = np.linalg.norm(pos[a] - pos[b])
            blk = np.exp(-d) * np.ones((off[a + 1] - off[a], off[b + 1] - off[b]))
            h0[off[a]:off[a + 1], off[b]:off[b + 1]] = blk
    h0 = h0 + h0.T + noise * rng.normal(size=(n, n))
    return 0.5 * (h0 + h0.T), np.eye(n)


def embed(structures):
    nb, eb = bases(LAYOUT)
    return h0_embedding(collate([structure_to_sample(s, LAYOUT, nb, eb) for s in structures]), nb, eb)


def test_embedding_invariant_to_rotation_translation_permutation():
    rng = np.random.default_rng(0)
    n = int(LAYOUT.atom_offsets(NUMBERS)[-1])
    a = rng.normal(size=(n, n))
    h0, s = a + a.T, np.eye(n)
    pos = BASE + rng.normal(scale=0.05, size=(3, 3))
    ref = embed([molecule(pos, h0, s)])[0]
    assert ref.shape == (embedding_dim(*bases(LAYOUT)),)
    scale = float(ref.abs().max())
    for k in range(3):
        q = random_orthogonal(rng, parity=k == 1)
        d = block_wigner(LAYOUT, NUMBERS, q).numpy()
        moved = molecule(pos @ q.T + rng.normal(size=3) * 3, d @ h0 @ d.T, d @ s @ d.T)
        assert float((embed([moved])[0] - ref).abs().max()) <= 1e-10 * scale, f"rotation {k}"
    perm = np.array([2, 0, 1])
    off = LAYOUT.atom_offsets(NUMBERS)
    ao = np.concatenate([np.arange(off[i], off[i + 1]) for i in perm])
    permuted = molecule(pos[perm], h0[np.ix_(ao, ao)], s[np.ix_(ao, ao)], NUMBERS[perm])
    assert float((embed([permuted])[0] - ref).abs().max()) <= 1e-10 * scale
    # and it is not blind: a different H0 moves it
    assert float((embed([molecule(pos, h0 + 0.1 * np.eye(n), s)])[0] - ref).abs().max()) > 1e-3


def test_embedding_per_structure_in_a_batch():
    """Pooling is per molecule: a batch gives the rows of the molecules embedded alone."""
    rng = np.random.default_rng(1)
    mols = [molecule(p, *matrices(p, rng, 0.01)) for p in BASE + rng.normal(scale=0.05, size=(4, 3, 3))]
    together = embed(mols)
    alone = torch.cat([embed([m]) for m in mols])
    assert torch.allclose(together, alone, rtol=0, atol=1e-14)


class _Module(torch.nn.Module):
    """Stand-in for a trained module: prediction = H0 + a geometry-dependent error growing with distortion."""

    def __init__(self):
        super().__init__()
        self.node_basis, self.edge_basis = bases(LAYOUT)

    def forward(self, batch):
        return batch.h0 + 1e-4 * torch.sin(batch.h0 * 7.0), None, None


def _dm(n, sigma, seed):
    rng = np.random.default_rng(seed)
    nb, eb = bases(LAYOUT)
    samples = []
    for _ in range(n):
        pos = BASE + rng.normal(scale=sigma, size=(3, 3))
        h0, s = matrices(pos, rng, 1e-6)
        samples.append(structure_to_sample(molecule(pos, h0, s, h=h0), LAYOUT, nb, eb))
    return samples


def fitted(seed=0):
    data = _dm(260, 0.05, seed)
    dm = SimpleNamespace(datasets={"train": data[:200], "calib": data[200:]}, collate_fn=collate)
    return fit_domain(_Module().eval(), dm, k=5, beta=0.05, seed=seed)


def test_domain_flag_rate_on_exchangeable_data_and_power_on_distorted():
    dom = fitted()
    nb, eb = bases(LAYOUT)
    fresh = collate(_dm(400, 0.05, 99))
    rate = float((dom.pvalue(h0_embedding(fresh, nb, eb)) <= 0.05).double().mean())
    n_cal = dom.score.n_calib
    expect = np.floor(0.05 * (n_cal + 1)) / (n_cal + 1)  # P(p <= beta) for continuous scores
    assert rate <= expect + 4 * np.sqrt(expect * (1 - expect) / 400) + 0.02  # + Beta spread of one calibration draw
    far = collate(_dm(50, 0.3, 98))
    assert float((dom.pvalue(h0_embedding(far, nb, eb)) <= 0.05).double().mean()) >= 0.9
    sig_near, sig_far = dom.sigma(h0_embedding(fresh, nb, eb)), dom.sigma(h0_embedding(far, nb, eb))
    assert (sig_near >= 1).all() and sig_far.median() > 2 * sig_near.median()  # wider intervals far away


def test_by_molecule_split_holds_out_whole_molecules():
    """Split by molecule: no held-out (domain-calibration) train structure shares its molecule with the reference."""
    rng = np.random.default_rng(5)
    nb, eb = bases(LAYOUT)
    samples, names = [], []
    for m in range(8):  # 8 "molecules": different base geometries, 10 conformers each
        base = BASE * (1.0 + 0.08 * m)
        for _ in range(10):
            pos = base + rng.normal(scale=0.02, size=(3, 3))
            h0, s = matrices(pos, rng, 1e-6)
            samples.append(structure_to_sample(molecule(pos, h0, s, h=h0), LAYOUT, nb, eb))
            names.append(f"m{m}")
    calib = _dm(25, 0.05, 6)
    dm = SimpleNamespace(datasets={"train": samples, "calib": calib}, collate_fn=collate, split_by="molecule",
                         structures={"train": [SimpleNamespace(meta={"molecule": n}) for n in names]})
    dom = fit_domain(_Module().eval(), dm, k=3, beta=0.05, holdout=0.3, seed=0)
    ref = dom.score.reference  # whitened, then standardised by the score, reference rows
    emb = ((h0_embedding(collate(samples), nb, eb) - dom.mean) / dom.scale) @ dom.components
    # a reference row matches to float32 round-off of the embedding (~6e-8); other molecules lie >= 1 away
    in_ref = torch.cdist((emb - dom.score.mean) / dom.score.scale, ref).min(1).values < 1e-5
    for m in range(8):
        rows = in_ref[[i for i, n in enumerate(names) if n == f"m{m}"]]
        assert bool(rows.all()) or not bool(rows.any()), f"molecule m{m} split between reference and hold-out"
    assert 0 < int((~in_ref).sum()) < len(samples) and int((~in_ref).sum()) % 10 == 0


def test_domain_round_trip_and_rejects_malformed():
    dom = fitted()
    d = dom.to_dict()
    back = HamiltonianDomain.from_dict(d)
    nb, eb = bases(LAYOUT)
    emb = h0_embedding(collate(_dm(5, 0.1, 3)), nb, eb)
    assert torch.equal(back.pvalue(emb), dom.pvalue(emb)) and torch.equal(back.sigma(emb), dom.sigma(emb))
    for key, value in (("sigma_power", -1), ("embedding", "other"), ("format_version", 9)):
        with pytest.raises(ValueError, match=key):
            HamiltonianDomain.from_dict(d | {key: value})
    bad = d | {"shift": d["shift"] | {"rows": [10**6] * len(d["shift"]["rows"])}}
    with pytest.raises(ValueError, match="shift"):
        HamiltonianDomain.from_dict(bad)


def test_orbital_groups_count_from_the_homo():
    g = orbital_groups(torch.tensor([4, 3]), torch.tensor([2, 1]))
    assert g.tolist() == [-2, -1, 0, 1, -1, 0, 1]


def test_deep_orbital_groups_are_pooled_until_a_finite_width_exists():
    """Molecules with 3, 5 and 8 occupied orbitals, 4 conformers each: HOMO−6..−8 exist only in the largest."""
    from sciml.uq import MondrianConformal

    n_occ = torch.tensor([3, 5, 8] * 4)
    groups = orbital_groups(n_occ + 3, n_occ)
    pooled = pool_deep_groups(groups, 9)  # alpha 0.1: at least ceil(1/0.1) - 1 = 9 scores per group
    counts = torch.unique(pooled, return_counts=True)[1]
    # counts HOMO−8..−6: 4 each (largest molecule only), HOMO−5, −4: 8, shallower 12: HOMO−4 and below pool (28)
    assert int(counts.min()) >= 9 and int(pooled.min()) == -4 and int((pooled == -4).sum()) == 28
    assert torch.equal(pooled[groups >= -4], groups[groups >= -4])  # shallower groups untouched
    scores = torch.rand(len(groups), generator=torch.Generator().manual_seed(0)).double()
    raw = MondrianConformal(score="normalized", alpha=0.1).fit(scores, groups)
    cal = MondrianConformal(score="normalized", alpha=0.1).fit(scores, pooled)
    assert torch.isinf(raw.threshold_or_inf(torch.tensor([-8]), 0.1)).all()
    assert torch.isfinite(cal.threshold_or_inf(cal.group_ids, 0.1)).all()
    assert torch.equal(pool_deep_groups(groups[:3], 9), groups[:3])  # too few in all: unchanged


def test_shift_aware_guard_and_equal_weights():
    dom = fitted()
    nb, eb = bases(LAYOUT)
    same = h0_embedding(collate(_dm(150, 0.05, 7)), nb, eb)  # 60 calib molecules, 12 whitened dimensions
    rows = torch.arange(150).repeat_interleave(2)
    groups = torch.tensor([-1, 0]).repeat(150)
    res = shift_thresholds(dom, same, rows, groups, 0.1)
    assert not res.guarded and torch.isfinite(res.thresholds).all()
    plain = torch.stack([torch.sort(dom.shift_scores[dom.shift_groups == g]).values[int(np.ceil(61 * 0.9)) - 1]
                         for g in (-1, 0)])
    assert (res.thresholds.reshape(150, 2) >= 0.5 * plain).all()  # same order as the plain quantile: no collapse
    far = h0_embedding(collate(_dm(150, 0.4, 8)), nb, eb)
    res = shift_thresholds(dom, far, rows, groups, 0.1)
    assert res.guarded and torch.isinf(res.thresholds).all()  # no calibration point resembles the batch
    with pytest.raises(ValueError, match="at least 5"):
        shift_thresholds(dom, same[:3], rows[:6], groups[:6], 0.1)
