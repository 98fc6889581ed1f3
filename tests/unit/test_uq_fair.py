"""Fair conformal with learned groups: marginal and per-drawn-group coverage, the learned group, AFCP fallback."""

from __future__ import annotations

import math

import pytest
import torch

from sciml.uq import APS, FairConformal, LabelSet, conformal_pvalues, conformal_quantile

torch.set_num_threads(1)
ALPHA, K = 0.1, 4


def _data(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Features z (n, 2) in [0,1]², attribute a = 1[z_0 > 0.6], model probabilities (n, K), labels (n,).

    The model is calibrated where a = 0 and overconfident in the wrong class where a = 1 (40% of points).
    """
    z = torch.rand(n, 2, generator=g, dtype=torch.float64)
    bad = z[:, 0] > 0.6
    logits = 2 * torch.randn(n, K, generator=g, dtype=torch.float64)
    probs = torch.softmax(logits, -1)
    y = torch.multinomial(probs, 1, generator=g).squeeze(-1)
    shuffled = torch.softmax(logits[:, torch.randperm(K, generator=g)] * 1.5, -1)
    probs = torch.where(bad.unsqueeze(-1), shuffled, probs)
    return z, bad.long().unsqueeze(-1), probs, y


def _scores(probs: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    return APS().all_scores(probs, generator=g)


def test_pvalues_match_conformal_quantile() -> None:
    """{s : p(s) >= α} is {s <= Q_{1-α}} for distinct scores."""
    cal = torch.rand(50, generator=torch.Generator().manual_seed(0), dtype=torch.float64).sort().values
    q = conformal_quantile(cal, ALPHA)
    test = torch.linspace(0, 1, 501, dtype=torch.float64)
    assert torch.equal(conformal_pvalues(cal, test) >= ALPHA, test <= q)


def test_afcp_coverage_marginal_and_in_group() -> None:
    """AFCP fallback over 500 trials: marginal and in-group coverage >= 1 - α within 3 SE; group = bad level."""
    g = torch.Generator().manual_seed(1)
    marginal, in_group, picked = [], [], []
    for _ in range(500):
        a_cal, s_cal_all, y_cal = (lambda d: (d[1], _scores(d[2], g), d[3]))(_data(200, g))
        s_cal = s_cal_all.gather(-1, y_cal.unsqueeze(-1)).squeeze(-1)
        fair = FairConformal(ALPHA, n_features=1, delta=0.2, n_groups=1, learner="afcp", seed=0).fit(a_cal, s_cal)
        picked.append(fair.level.tolist() == [0, 1])
        _, a, probs, y = _data(100, g)
        test_in = fair.membership(a)
        hit = fair.predict_set(a, _scores(probs, g), test_in=test_in).contains(y)
        marginal.append(hit.double().mean().item())
        inside = test_in[:, 0]
        if inside.any():
            in_group.append(hit[inside].double().mean().item())
    assert sum(picked) / len(picked) > 0.95  # the under-covered level is found
    for cov in (marginal, in_group):
        c = torch.tensor(cov)
        assert c.mean().item() >= 1 - ALPHA - 3 * c.std().item() / math.sqrt(len(c))


def test_learned_group_finds_and_repairs_the_bad_region() -> None:
    """The MLP group puts more mass on the under-covered region; coverage there rises above the marginal set's."""
    g = torch.Generator().manual_seed(2)
    z, _, probs, y = _data(2000, g)
    s = _scores(probs, g).gather(-1, y.unsqueeze(-1)).squeeze(-1)
    fair = FairConformal(ALPHA, n_features=2, delta=0.3, n_groups=20, epochs=300, seed=0).fit(z, s)
    zt, at, pt, yt = _data(4000, g)
    bad = at[:, 0] == 1
    prob = fair.group_prob(zt).detach()
    assert prob[bad].mean() > prob[~bad].mean() + 0.3
    st = _scores(pt, g)
    fair_hit = fair.predict_set(zt, st, generator=g).contains(yt)
    marg_hit = LabelSet(conformal_pvalues(fair.scores, st) >= ALPHA).contains(yt)
    se = math.sqrt(0.25 / int(bad.sum()))
    assert fair_hit[bad].double().mean() >= marg_hit[bad].double().mean() + 0.05 + 3 * se
    assert fair_hit.double().mean() >= 1 - ALPHA - 3 * math.sqrt(0.09 / 4000)


def test_bad_input() -> None:
    """Shape mismatch and bad options fail with a clear message."""
    with pytest.raises(ValueError, match="z must have shape"):
        FairConformal().fit(torch.rand(5, 1, dtype=torch.float64), torch.rand(6, dtype=torch.float64))
    with pytest.raises(ValueError, match="learner"):
        FairConformal(learner="vae")
    with pytest.raises(RuntimeError, match="not fitted"):
        FairConformal().predict_set(torch.rand(2, 1), torch.rand(2, 3))
