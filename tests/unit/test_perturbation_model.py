"""PerturbationFlow LightningModule on tiny synthetic batches of the data-module contract."""

from __future__ import annotations

import pytest
import torch

from sciml.perturbation.module import PerturbationFlow

G, V = 8, 10  # measured genes, vocabulary (two unmeasured perturbed genes)


def _batch(c=3, n=16, shift=2.0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ctrl = torch.rand(c, n, G, generator=gen)
    pert = torch.tensor([[0, -1], [1, 9], [-1, -1]])[:c]
    x = ctrl + torch.randn(c, n, G, generator=gen) * 0.05
    x[0, :, 0] += shift  # condition 0 moves gene 0
    return {"x_pert": x, "x_ctrl": ctrl, "pert_genes": pert, "condition": ["g0+ctrl", "g1+g9", "ctrl"][:c]}


def _model(path="control", **flow):
    torch.manual_seed(0)
    m = PerturbationFlow({"dim": 16, "depth": 1, "heads": 2}, [f"g{i}" for i in range(V)], n_measured=G,
                         flow={"path": path, "steps": 4, **flow}, optim={"lr": 3e-3, "scheduler": "none"})
    m.net.set_graph(torch.tensor([[0, 1, 2], [1, 2, 3]]))
    return m


@pytest.mark.parametrize("path", ["control", "noise"])
def test_losses_and_shapes(path):
    m = _model(path)
    b = _batch()
    out = m.losses(b)
    assert set(out) == {"loss", "cfm", "mmd"} and all(torch.isfinite(v) for v in out.values())
    torch.testing.assert_close(out["loss"], out["cfm"] + m.flow["mmd_weight"] * out["mmd"])
    pred = m.predict_step(b)
    assert pred.mean.shape == (3, G) and pred.meta["cells"].shape == (3, 16, G)
    assert pred.meta["genes"] == [f"g{i}" for i in range(G)]


def _live(m: PerturbationFlow) -> PerturbationFlow:
    """Replace the zero initialisations (which stop gradients upstream of a zero layer) by small random weights."""
    for p in m.parameters():
        if p.dim() > 1 and (p == 0).all():
            torch.nn.init.normal_(p, std=0.1)
    return m


@pytest.mark.parametrize("path", ["control", "noise"])
def test_every_trainable_parameter_gets_a_finite_nonzero_gradient(path):
    m = _live(_model(path))
    torch.manual_seed(1)
    m.losses(_batch())["loss"].backward()
    trainable = {n: p for n, p in m.named_parameters() if p.requires_grad}
    assert trainable
    missing = [n for n, p in trainable.items() if p.grad is None]
    bad = [n for n, p in trainable.items() if p.grad is not None and not torch.isfinite(p.grad).all()]
    dead = [n for n, p in trainable.items() if p.grad is not None and float(p.grad.abs().max()) == 0.0]
    assert not missing and not bad and not dead, (missing, bad, dead)


def test_zero_initialised_model_learns_through_its_head_first():
    """At the zero initialisation the output layer still gets a gradient (training can start)."""
    m = _model()
    torch.manual_seed(1)
    m.losses(_batch())["loss"].backward()
    assert m.net.head.weight.grad is not None and float(m.net.head.weight.grad.abs().max()) > 0


@pytest.mark.parametrize("path", ["control", "noise"])
def test_a_gradient_step_decreases_the_loss_on_a_fixed_batch(path):
    """Same batch, same random draws (t, noise): one small SGD step lowers the loss (first order: −lr·‖∇L‖²)."""
    m = _live(_model(path))
    b = _batch()

    def loss():
        torch.manual_seed(7)
        return m.losses(b)["loss"]

    before = loss()
    before.backward()
    grad_sq = sum(float(p.grad.pow(2).sum()) for p in m.parameters() if p.grad is not None)
    lr = 1e-3
    with torch.no_grad():
        for p in m.parameters():
            if p.grad is not None:
                p -= lr * p.grad
        after = loss()
    before = before.detach()
    assert float(after) < float(before)
    assert float(before - after) == pytest.approx(lr * grad_sq, rel=0.3)  # the first-order decrease


def test_gene_subset_training_step():
    m = _model(max_genes=5)
    m.train()
    assert m._subset(G).shape == (5,)
    assert torch.isfinite(m.losses(_batch())["loss"])
    m.eval()
    assert m._subset(G) is None


def test_training_learns_a_mean_shift():
    m = _model(mmd_weight=0.1)
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    b = _batch()
    before = m.predict_step(b).mean[0, 0]
    for _ in range(150):
        opt.zero_grad()
        m.losses(b)["loss"].backward()
        opt.step()
    after = m.predict_step(b).mean
    assert abs(float(before)) < 0.3  # zero-initialised head: no change at start
    assert float(after[0, 0]) == pytest.approx(2.0, abs=0.4)
    assert float(after[2].abs().max()) < 0.4  # control stays put


def test_state_dict_roundtrip_keeps_graph():
    m = _model()
    fresh = PerturbationFlow(**m.hparams)
    assert fresh.net.adjacency.numel() == 0
    fresh.load_state_dict(m.state_dict(), strict=True)
    assert torch.equal(fresh.net.adjacency, m.net.adjacency)


def test_unknown_path_is_rejected():
    with pytest.raises(ValueError, match="flow.path"):
        _model("schrodinger")


def test_evaluation_in_strided_gene_chunks():
    m = _model(max_genes=3).eval()
    b = _batch()
    for p in m.parameters():
        if p.dim() > 1 and (p == 0).all():
            torch.nn.init.normal_(p, std=0.1)
    t = torch.rand(3, 16)
    v = m.velocity(b["x_pert"], t, b["x_ctrl"], b["pert_genes"])
    prior = m.prior(b["pert_genes"])
    for i in range(3):  # ceil(8 / 3) = 3 chunks: genes i, i+3, ...
        idx = torch.arange(i, G, 3)
        part = m.velocity(b["x_pert"][..., idx], t, b["x_ctrl"][..., idx], b["pert_genes"], idx, prior[:, idx])
        torch.testing.assert_close(v[..., idx], part)


def test_effect_prior_channels():
    m = _model().eval()
    m.set_single_effects({0: torch.arange(G, dtype=torch.float32), 1: torch.ones(G)})
    pr = m.prior(torch.tensor([[0, 1], [0, -1], [9, -1]]))
    assert pr.shape == (3, G, 4)
    torch.testing.assert_close(pr[0, :, 0], torch.arange(G) + 1.0)  # Δa + Δb
    torch.testing.assert_close(pr[0, :, 1], torch.arange(G, dtype=torch.float32))  # Δa·Δb
    torch.testing.assert_close(pr[1, 0, 2:], torch.tensor([0.5, 0.5]))  # one known of one perturbed (of width 2)
    assert (pr[2, :, :3] == 0).all()  # gene 9 has no measured single: unknown


def test_untrained_model_with_additive_skip_is_the_additive_baseline():
    m = _model(sigma=0.0, nonnegative=False).eval()  # zero-initialised head: v = Δa + Δb exactly (no projection)
    m.set_single_effects({0: torch.linspace(-1, 1, G), 1: torch.ones(G)})
    b = _batch()
    pred = m.predict_step(b).mean
    torch.testing.assert_close(pred[0], torch.linspace(-1, 1, G), atol=1e-5, rtol=0)  # single g0
    torch.testing.assert_close(pred[1], torch.ones(G), atol=1e-5, rtol=0)  # g1 + g9 (g9 unknown: 0)
    torch.testing.assert_close(pred[2], torch.zeros(G), atol=1e-5, rtol=0)  # control


def _saturating(da, db):
    """A sub-additive (saturating) rule the combination MLP must learn: Δab = tanh(Δa + Δb)."""
    return torch.tanh(da + db)


def test_combination_rule_learns_a_saturating_interaction():
    from sciml.perturbation.nn.combination import CombinationRule

    gen = torch.Generator().manual_seed(0)
    da, db = torch.randn(20, 50, generator=gen), torch.randn(20, 50, generator=gen)
    mu0 = torch.rand(50, generator=gen)
    rule = CombinationRule(16)
    torch.testing.assert_close(rule(da, db, mu0), da + db)  # untrained: additive
    target = _saturating(da, db)
    add_mse = float((da + db - target).pow(2).mean())
    rule.fit(da, db, mu0, target, steps=300)
    qa, qb = torch.randn(5, 50, generator=gen), torch.randn(5, 50, generator=gen)  # held-out doubles
    with torch.no_grad():
        held = float((rule(qa, qb, mu0) - _saturating(qa, qb)).pow(2).mean())
        torch.testing.assert_close(rule(qa, qb, mu0), rule(qb, qa, mu0))  # symmetric in the two genes
    assert held < 0.1 * add_mse


def test_combination_prior_is_the_untrained_models_mean_and_round_trips():
    m = _model(sigma=0.0, prior="combination", nonnegative=False).eval()
    gen = torch.Generator().manual_seed(1)
    effects = {i: torch.randn(G, generator=gen) for i in range(6)}
    m.set_single_effects(effects)
    doubles = [(a, b, _saturating(effects[a], effects[b])) for a, b in [(2, 3), (2, 4), (3, 5), (4, 5), (3, 4)]]
    assert m.fit_combination(doubles, torch.zeros(G)) is not None
    assert not any(p.requires_grad for p in m.combination.parameters())  # frozen during flow training
    b = _batch()
    b["pert_genes"] = torch.tensor([[0, 1], [0, -1], [1, 9]])
    pred = m.predict_step(b).mean
    with torch.no_grad():
        expected = m.combination(effects[0], effects[1], m.ctrl_mean)
    torch.testing.assert_close(pred[0], expected, atol=1e-5, rtol=0)  # double of known singles: the rule
    assert (expected - effects[0] - effects[1]).abs().max() > 1e-3  # ... which is not the additive effect
    torch.testing.assert_close(pred[1], effects[0], atol=1e-5, rtol=0)  # single: its measured effect
    torch.testing.assert_close(pred[2], effects[1], atol=1e-5, rtol=0)  # unknown partner: additive fallback
    other = _model(sigma=0.0, prior="combination", nonnegative=False)
    other.load_state_dict(m.state_dict(), strict=True)
    torch.testing.assert_close(other.eval().predict_step(b).mean, pred)


def test_unknown_prior_is_rejected():
    with pytest.raises(ValueError, match="flow.prior"):
        _model(prior="quadratic")


def test_singles_tables_have_a_row_per_training_perturbation_and_old_states_load():
    """Tables ``(1 + perturbed genes, G)``, not ``(vocabulary, G)``; a state saved with ``(V, G)`` tables and no
    ``rows`` loads into the compact layout with the same prior."""
    from sciml.perturbation.module import PerturbationFlow

    genes = [f"g{i}" for i in range(12)]
    m = PerturbationFlow({"dim": 16, "depth": 1, "heads": 2}, genes, n_measured=10, perturbed_genes=["g2", "g7"],
                         flow={"prior": "masking", "denoise": "eb_single", "kappa": 0.5})
    gen = torch.Generator().manual_seed(0)
    m.set_single_effects({2: torch.randn(10, generator=gen), 7: torch.randn(10, generator=gen)},
                         {2: torch.rand(10, generator=gen) * 0.1, 7: torch.rand(10, generator=gen) * 0.1})
    assert m.single_effect.shape == (3, 10) and m.rows[[2, 7]].tolist() == [1, 2] and int(m.rows.sum()) == 3
    with pytest.raises(ValueError, match="no row"):
        m.set_single_effects({3: torch.ones(10)})
    old = {k: v.clone() for k, v in m.state_dict().items() if k != "rows"}
    for name in ("single_effect", "single_var", "joint_effect", "joint_var"):
        old[name] = old[name][m.rows]  # by vocabulary entry, as states were saved before
    fresh = PerturbationFlow(**m.hparams)
    fresh.load_state_dict(old, strict=True)
    pert = torch.tensor([[2, 7], [2, -1], [7, 3]])
    torch.testing.assert_close(fresh.prior_mean(pert), m.prior_mean(pert), rtol=0, atol=0)
    for name in ("single_effect", "single_var", "joint_effect", "joint_var", "rows", "unknown_effect"):
        torch.testing.assert_close(getattr(fresh, name), getattr(m, name), rtol=0, atol=0)
