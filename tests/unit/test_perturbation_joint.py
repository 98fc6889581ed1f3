"""Singles estimated jointly with the training doubles (``flow.denoise: eb_joint``, :mod:`sciml.perturbation.nn.joint`).

Exact cases of the GLS (no doubles: the measured singles; noise-free additive doubles: the true singles), its
variance against the error it makes (fixed seed, 12,000 estimates: the ratio's sampling error is about 1.3%), the
moment estimate of the interaction variance, and the cross-fitting of κ: no training double scores singles fitted on
it.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from sciml.perturbation.nn.joint import interaction_variance, joint_singles
from sciml.perturbation.nn.masking import masking
from sciml.perturbation.nn.shrinkage import ash_by_row

from .doubles_dm import screen_of
from .test_perturbation_masking import _screen

PAIRS = torch.tensor(list(itertools.combinations(range(6), 2)))  # all 15 doubles of 6 singles


def test_joint_singles_are_the_singles_without_doubles_and_exact_on_additive_doubles():
    gen = torch.Generator().manual_seed(0)
    beta = torch.randn(4, 3, generator=gen)
    var = 0.1 + torch.rand(4, 3, generator=gen)
    none = torch.zeros(0, 2, dtype=torch.long)
    got, got_var = joint_singles(beta, var, none, torch.zeros(0, 3), torch.zeros(0, 3))
    torch.testing.assert_close(got, beta)
    torch.testing.assert_close(got_var, var)
    pairs = torch.tensor(list(itertools.combinations(range(3), 2)))  # single 3 is in no double
    doubles = beta[pairs[:, 0]] + beta[pairs[:, 1]]
    got, got_var = joint_singles(beta, var, pairs, doubles, 0.05 * torch.ones_like(doubles))
    torch.testing.assert_close(got, beta, atol=1e-5, rtol=0.0)
    assert (got_var[:3] < var[:3]).all()
    torch.testing.assert_close(got_var[3], var[3])


def _screen_of(interaction: float, seed: int = 1, genes: int = 2000):
    """True singles ``(6, genes)``, measured singles and doubles (unit noise; interactions of s.d. ``interaction``)."""
    gen = torch.Generator().manual_seed(seed)
    beta = torch.randn(6, genes, generator=gen, dtype=torch.float64)
    d = beta + torch.randn(6, genes, generator=gen, dtype=torch.float64)
    eps = interaction * torch.randn(len(PAIRS), genes, generator=gen, dtype=torch.float64)
    dab = beta[PAIRS[:, 0]] + beta[PAIRS[:, 1]] + eps + torch.randn(len(PAIRS), genes, generator=gen,
                                                                      dtype=torch.float64)
    return beta, d, dab


def test_additive_doubles_sharpen_the_singles_and_the_variance_matches_the_error():
    beta, d, dab = _screen_of(0.0)
    got, var = joint_singles(d, torch.ones_like(d), PAIRS, dab, torch.ones_like(dab))
    err = (got - beta).square().mean()
    # each single: its own measurement and 5 doubles; with τ² = 0 known, diag((I + XᵀX)⁻¹) = 1/5 − 1/55 ≈ 0.18 of the
    # single's 1. τ² is estimated (clipped at 0, so above 0 on about half of the genes): the weights are a little off
    # the optimum (error above 0.18) and the stated variance a little above the error (conservative)
    assert 0.97 / 5.5 < err < 0.25 * (d - beta).square().mean()
    assert 0.8 < float(err / var.mean()) < 1.03


def test_interacting_doubles_count_little_and_tau2_is_their_variance():
    beta, d, dab = _screen_of(3.0)
    v, vab = torch.ones_like(d), torch.ones_like(dab)
    tau2 = interaction_variance(d, v, PAIRS, dab, vab)
    # E[r²] = τ² + v_ab + v_a + v_b, so the moment estimate is unbiased: mean over 2000 genes near 9
    assert abs(float(tau2.mean()) - 9.0) < 0.3
    got, var = joint_singles(d, v, PAIRS, dab, vab)
    # each double now counts as variance 1 + 9: the singles still gain (0.70 against 1.01)
    err = (got - beta).square().mean()
    assert err < 0.9 * (d - beta).square().mean()
    # τ² per gene rests on 15 residuals (relative s.d. about 0.4): the weights are that far off the optimum, which
    # costs the estimate a few percent beyond its stated variance (1.08 here)
    assert 0.9 < float(err / var.mean()) < 1.15


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match=r"\(P, 2\)"):
        joint_singles(torch.zeros(3, 2), torch.ones(3, 2), torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 2),
                      torch.zeros(2, 2))


def test_the_model_shrinks_the_joint_singles_and_old_states_load():
    from sciml.perturbation.select import fit_joint

    m, dm = _screen(lambda a, b: a + b, noise=0.3)
    m.set_prior(kappa=0.0, denoise="eb_joint")
    known = m.has_effect
    at = m.rows[known]
    single = ash_by_row(m.single_effect[at], m.single_var[at])
    torch.testing.assert_close(m.shrunk_singles()[at], single)  # no doubles fitted yet: eb_single
    screen = screen_of(m, dm)
    m.set_joint_singles(fit_joint(screen.singles, screen.doubles["train"]))
    assert not torch.allclose(m.joint_effect[at], m.single_effect[at])
    torch.testing.assert_close(m.joint_effect[m.rows[~known]], m.single_effect[m.rows[~known]])  # unknown: 0
    torch.testing.assert_close(m.shrunk_singles()[at], ash_by_row(m.joint_effect[at], m.joint_var[at]))
    state = {k: v for k, v in m.state_dict().items() if not k.startswith("joint_")}  # saved before eb_joint
    again = _screen(lambda a, b: a + b)[0]
    again.load_state_dict(state)
    torch.testing.assert_close(again.joint_effect, again.single_effect)


def test_choose_masking_cross_fits_the_joint_singles(monkeypatch):
    from sciml.perturbation import select

    m, dm = _screen(lambda a, b: masking(a, b, 1.0), noise=0.3)
    calls = []
    fit, obs = select.fit_joint, select.prior_errors

    def record_fit(singles, doubles):
        calls.append(["fit", list(doubles.keys)])
        return fit(singles, doubles)

    def record_score(singles, settings, tables, doubles):  # the doubles scored
        calls.append(["score", list(doubles.keys)])
        return obs(singles, settings, tables, doubles)

    monkeypatch.setattr(select, "fit_joint", record_fit)
    monkeypatch.setattr(select, "prior_errors", record_score)
    choice = select.choose_masking(m.prior_settings.replace(denoise="eb_joint"), screen_of(m, dm), seed=3)
    train, val = dm.conditions["train"], dm.conditions["val"]
    last_fit = [next(calls[j][1] for j in range(i - 1, -1, -1) if calls[j][0] == "fit")
                for i, (kind, _) in enumerate(calls) if kind == "score"]  # the singles each score was made with
    scored = list(zip(last_fit, [keys for kind, keys in calls if kind == "score"], strict=True))
    assert all(not set(held) & set(fitted) for fitted, held in scored if held != val)
    assert sorted({k for _, held in scored for k in held}) == sorted(train + val)  # every double scored...
    assert len({tuple(held) for _, held in scored}) == 6  # ...in val and five disjoint training folds
    assert choice.settings.denoise == "eb_joint" and choice.settings.kappa >= 0.7, choice


def test_genes_in_blocks_and_uncoupled_singles_give_the_one_system_gls(monkeypatch):
    """The GLS over all singles at once, per gene (the formula of the module docstring, written out here), equals the
    one solved in blocks of genes over the singles that share a double (others keep their measurement)."""
    import sciml.perturbation.nn.joint as joint

    g = torch.Generator().manual_seed(0)
    s, n_genes = 12, 90
    d = torch.randn(s, n_genes, generator=g, dtype=torch.float64)
    v = torch.rand(s, n_genes, generator=g, dtype=torch.float64) * 0.1
    pairs = torch.tensor([[0, 1], [1, 2], [0, 2], [3, 4], [2, 5]])  # singles 6-11 are in no double
    dab = torch.randn(len(pairs), n_genes, generator=g, dtype=torch.float64)
    vab = torch.rand(len(pairs), n_genes, generator=g, dtype=torch.float64) * 0.1
    design = torch.cat([torch.eye(s, dtype=torch.float64), torch.nn.functional.one_hot(pairs, s).sum(1).double()])
    w = 1.0 / torch.cat([v, vab + interaction_variance(d, v, pairs, dab, vab)]).clamp_min(1e-12)
    cov = torch.linalg.inv(torch.einsum("ns,ng,nt->gst", design, w, design))
    beta = torch.einsum("gst,tg->sg", cov, design.T @ (w * torch.cat([d, dab])))
    monkeypatch.setattr(joint, "SYSTEM_ENTRIES", 100)  # 2 genes per block
    got, var = joint.joint_singles(d, v, pairs, dab, vab)
    torch.testing.assert_close(got, beta, rtol=0, atol=1e-12)
    torch.testing.assert_close(var, torch.diagonal(cov, dim1=-2, dim2=-1).T, rtol=0, atol=1e-12)
    torch.testing.assert_close(got[6:], d[6:], rtol=0, atol=0)
