"""Human–AI two-threshold sets: both conditional coverages (offline, ≥ 500 trials) and online per-group bounds."""

from __future__ import annotations

import json
import math

import pytest
import torch

from sciml.uq import LAC, HumanAIConformal, OnlineHumanAI, calibrator_from_dict, human_ai_bound
from sciml.uq.quantile import conformal_rank

torch.set_num_threads(1)
K, EPS, DELTA = 5, 0.1, 0.6


def _draw(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Calibrated classifier (Y ~ p̂), LAC label scores (n, K), labels (n,), human sets (n, K) holding Y w.p. 0.7."""
    probs = torch.distributions.Dirichlet(torch.ones(K, dtype=torch.float64)).sample((n,))
    probs = torch.softmax(3 * probs.log().clamp_min(-30) + 0.5 * torch.randn(n, K, generator=g), -1)
    y = torch.multinomial(probs, 1, generator=g).squeeze(-1)
    human = torch.rand(n, K, generator=g) < 0.3
    keep_true = torch.rand(n, generator=g) < 0.7
    human[torch.arange(n), y] = keep_true
    return LAC().all_scores(probs), y, human


def test_offline_both_conditional_coverages() -> None:
    """P(Y∈C | Y∈H) and P(Y∈C | Y∉H): mean over 600 trials within 3 SE of E[k_g/(n_g+1)] in each group."""
    torch.manual_seed(0)  # Dirichlet sampling uses the global generator
    g = torch.Generator().manual_seed(0)
    cov = {True: [], False: []}
    expect = {True: [], False: []}
    for _ in range(600):
        scores, y, human = _draw(150, g)
        true_score = scores[torch.arange(150), y]
        in_h = human[torch.arange(150), y]
        cal = HumanAIConformal(EPS, DELTA).fit(true_score, in_h)
        t_scores, t_y, t_h = _draw(400, g)
        hit = cal.predict_set(t_scores, t_h).contains(t_y)
        t_in = t_h[torch.arange(400), t_y]
        for grp, level in ((True, EPS), (False, DELTA)):
            n_g = int((in_h == grp).sum())
            cov[grp].append(hit[t_in == grp].double().mean().item())
            expect[grp].append(min(conformal_rank(n_g, level), n_g + 1) / (n_g + 1))
    for grp, level in ((True, EPS), (False, DELTA)):
        c, e = torch.tensor(cov[grp]), torch.tensor(expect[grp])
        se = c.std().item() / math.sqrt(len(c))
        assert abs(c.mean().item() - e.mean().item()) <= 3 * se, grp
        assert c.mean().item() >= 1 - level - 3 * se


def test_offline_set_structure_and_round_trip() -> None:
    """Labels in H use b, labels outside use a; to_dict round trip gives the same sets."""
    scores = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 0.05, 0.15], dtype=torch.float64)
    in_h = torch.tensor([True] * 10 + [False] * 2)
    cal = HumanAIConformal(eps=0.2, delta=0.5).fit(scores, in_h)
    b, a = cal.thresholds()
    assert b.item() == 0.9  # k = ⌈11·0.8⌉ = 9
    assert a.item() == 0.15  # k = ⌈3·0.5⌉ = 2 of the two out-of-H scores
    assert HumanAIConformal(0.2, 0.1).fit(scores, in_h).thresholds()[1].item() == math.inf  # k = 3 > 2
    test = torch.tensor([[0.85, 0.95, 0.1]], dtype=torch.float64)
    human = torch.tensor([[True, True, False]])
    assert cal.predict_set(test, human).mask.tolist() == [[True, False, True]]
    again = calibrator_from_dict(json.loads(json.dumps(cal.to_dict())))
    assert torch.equal(again.predict_set(test, human).mask, cal.predict_set(test, human).mask)


def test_online_per_group_bound() -> None:
    """Per revealed group, |miss rate - q_g| <= (B + η)/(η T_g), with regime switches and ×10 score jumps."""
    g = torch.Generator().manual_seed(1)
    for t in (500, 2000, 5000):
        cal, lr = OnlineHumanAI(EPS, DELTA, lr=0.05, b0=0.5, a0=0.5), 0.05
        misses = {True: [], False: []}
        scale = torch.where((torch.arange(t) // (t // 4)) % 2 == 1, 10.0, 1.0)
        for i in range(t):
            scores = scale[i] * torch.rand(1, K, generator=g, dtype=torch.float64)
            y = torch.randint(K, (1,), generator=g)
            human = torch.rand(1, K, generator=g) < (0.2 if i % 3 else 0.8)
            in_h = bool(human[0, y])
            misses[in_h].append(not bool(cal.predict_set(scores, human).contains(y)))
            cal.update(scores[0, y], in_h)
        for grp, level in ((True, EPS), (False, DELTA)):
            t_g = len(misses[grp])
            rate = sum(misses[grp]) / t_g
            assert abs(rate - level) <= human_ai_bound(t_g, lr, 10.0), (t, grp)


def test_bad_input() -> None:
    """in_human must be a bool mask of the scores' length; the human set a bool mask like the scores."""
    with pytest.raises(ValueError, match="in_human"):
        HumanAIConformal().fit(torch.rand(4, dtype=torch.float64), torch.ones(4))
    cal = HumanAIConformal().fit(torch.rand(10, dtype=torch.float64), torch.ones(10, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool mask"):
        cal.predict_set(torch.rand(2, 3, dtype=torch.float64), torch.ones(2, 4, dtype=torch.bool))
