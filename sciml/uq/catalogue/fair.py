r"""Fair conformal classification with learned (representation-based) groups.

Reference: "Fair conformal classification via representation-based groups" (ICLR 2026);
fallback: adaptively selected groups, AFCP (Zhou & Sesia 2024).

Algorithm (calibration scores ``s_i`` of the true labels, e.g. APS; sensitive features ``z_i``):

1. Split the calibration set in halves A and B. On A, mark ``c_i = 1[s_i <= Q_{1-α}(S_A)]`` (covered by the
   marginal set).
2. Learn a soft group ``g(z) ∈ [0, 1]`` on A that *minimises* the soft coverage ``Σ g_i c_i / Σ g_i`` subject
   to the mass ``mean g >= δ`` (penalty ``ρ (δ - mean g)_+²``): the worst-covered region.
3. Draw ``n_groups`` hard groups by independent ``Bernoulli(g(z))`` memberships for the B points and, at
   prediction time, for each test point.
4. For a test label ``y`` with score ``s``: group p-value ``p_k(y) = (1 + #{i ∈ B_k : s_i >= s})/(|B_k| + 1)``,
   marginal ``p(y)`` the same over all calibration scores; output
   ``{y : max_{k ∋ test} p_k(y) >= α} ∪ {y : p(y) >= α}``.

Guarantees: ``g`` is fitted on A only and memberships are independent coins given ``z``, so inside each drawn
group the B scores and the test score are exchangeable: ``P(Y ∈ C | test ∈ B_k) >= 1 - α`` for every ``k``;
the union with the marginal set keeps ``P(Y ∈ C) >= 1 - α``.

**Labels (details the paper leaves open).** The paper's "VAE-like" group network is replaced by a deterministic
MLP encoder with a sigmoid output (``learner="mlp"``). ``learner="afcp"`` is the documented fallback in the
spirit of AFCP: ``z`` holds integer attributes, and the group is the single attribute level ``{z_j = v}``
with the lowest coverage on A among levels holding at least a fraction ``δ`` of A (a hard indicator, so all
drawn groups coincide). Overlapping groups with a guarantee for *each* attribute level need conditional
calibration (Gibbs, Cherian, Candès 2023), not provided.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .._checks import check_scores, finite_real, is_int, prepare_state_load
from ..quantile import check_alpha, conformal_pvalues, conformal_quantile
from ..sets import LabelSet

__all__ = ["FairConformal", "afcp_select"]


def afcp_select(attributes: Tensor, covered: Tensor, min_frac: float) -> tuple[int, int]:
    """Attribute level ``(j, v)`` with the lowest coverage among levels holding ``>= min_frac`` of the points."""
    best, choice = 2.0, (0, int(attributes[0, 0]))
    for j in range(attributes.shape[1]):
        for v in torch.unique(attributes[:, j]).tolist():
            member = attributes[:, j] == v
            if member.double().mean() >= min_frac and covered[member].double().mean() < best:
                best, choice = float(covered[member].double().mean()), (j, int(v))
    return choice


class FairConformal(nn.Module):
    """Fair conformal classification with a learned worst-covered group (module docstring).

    Parameters
    ----------
    alpha : float
        Miscoverage in ``(0, 1)``.
    n_features : int
        Dimension ``d`` of the sensitive features ``z``.
    delta : float
        Minimum group mass ``δ`` in ``(0, 1)`` (paper: 0.3).
    n_groups : int
        Number of Bernoulli groups drawn (paper: about 20).
    learner : str
        ``"mlp"`` (learned soft group) or ``"afcp"`` (AFCP-style attribute-level fallback; integer ``z``).
    hidden, epochs, seed
        MLP width, full-batch Adam epochs, seed of the split, the initialisation and the group draws.

    """

    def __init__(self, alpha: float = 0.1, n_features: int = 1, delta: float = 0.3, n_groups: int = 20,
                 learner: str = "mlp", hidden: int = 16, epochs: int = 300, seed: int = 0) -> None:
        super().__init__()
        self.alpha, self.delta = check_alpha(alpha), finite_real(delta, "delta")
        if not 0 < self.delta < 1 or learner not in ("mlp", "afcp"):
            raise ValueError(f"need delta in (0, 1) and learner in ('mlp', 'afcp'), got {delta!r}, {learner!r}")
        if not all(is_int(v) and v >= 1 for v in (n_features, n_groups, hidden, epochs)):
            raise ValueError("n_features, n_groups, hidden and epochs must be positive integers")
        self.learner, self.n_groups, self.epochs, self.seed = learner, int(n_groups), int(epochs), int(seed)
        gen = torch.Generator().manual_seed(self.seed)
        self.net = nn.Sequential(nn.Linear(n_features, hidden), nn.Tanh(), nn.Linear(hidden, 1)).double()
        with torch.no_grad():
            for p in self.net.parameters():
                p.copy_(0.5 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
        self.register_buffer("level", torch.tensor([-1, 0]))  # AFCP (j, v); j = -1 for the MLP learner
        self.register_buffer("scores", torch.empty(0, dtype=torch.float64))  # all calibration scores, sorted
        self.register_buffer("group_scores", torch.empty(0, dtype=torch.float64))  # B scores
        self.register_buffer("members", torch.empty(0, 0, dtype=torch.bool))  # (n_groups, n_B)

    def group_prob(self, z: Tensor) -> Tensor:
        """Soft membership ``g(z)`` of the worst-covered group, shape ``(n,)``."""
        if self.learner == "afcp":
            return (z[:, int(self.level[0])] == self.level[1]).double()
        return torch.sigmoid(self.net(z.double())).squeeze(-1)

    def _learn_group(self, z: Tensor, covered: Tensor) -> None:
        if self.learner == "afcp":
            self.level = torch.tensor(afcp_select(z, covered, self.delta))
            return
        opt = torch.optim.Adam(self.net.parameters(), lr=0.02)
        c = covered.double()
        for _ in range(self.epochs):
            g = self.group_prob(z)
            loss = (g * c).sum() / g.sum().clamp_min(1e-9) + 10 * (self.delta - g.mean()).clamp_min(0) ** 2
            opt.zero_grad()
            loss.backward()
            opt.step()

    def fit(self, z: Tensor, scores: Tensor) -> FairConformal:
        """Fit on features ``z`` ``(n, d)`` and true-label calibration scores ``(n,)`` (``n >= 4``)."""
        check_scores(scores)
        if not isinstance(z, Tensor) or z.dim() != 2 or z.shape[0] != scores.numel() or scores.numel() < 4:
            raise ValueError(f"z must have shape (n, d) with n = {scores.numel()} >= 4 matching the scores")
        gen = torch.Generator().manual_seed(self.seed + 1)
        perm = torch.randperm(scores.numel(), generator=gen)
        a, b = perm[: scores.numel() // 2], perm[scores.numel() // 2:]
        s = scores.detach().double()
        self._learn_group(z[a], s[a] <= conformal_quantile(s[a], self.alpha))
        with torch.no_grad():
            g_b = self.group_prob(z[b])
        self.members = torch.rand(self.n_groups, b.numel(), generator=gen, dtype=torch.float64) < g_b
        self.group_scores, self.scores = s[b], s.sort().values
        return self

    @torch.no_grad()
    def membership(self, z: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Test memberships ``Bernoulli(g(z))`` in each drawn group, bool ``(m, n_groups)``."""
        draw = torch.rand(z.shape[0], self.n_groups, generator=generator, dtype=torch.float64)
        return draw < self.group_prob(z).unsqueeze(-1)

    @torch.no_grad()
    def group_pvalues(self, z: Tensor, all_scores: Tensor, generator: torch.Generator | None = None,
                      test_in: Tensor | None = None) -> Tensor:
        """``max_{k ∋ test} p_k(y)`` for every test point and label, ``(m, K)``; 0 outside every group.

        ``test_in`` ``(m, n_groups)`` overrides the memberships drawn by :meth:`membership`.
        """
        if self.scores.numel() == 0:
            raise RuntimeError("FairConformal is not fitted; call fit(z, scores) first")
        test_in = self.membership(z, generator) if test_in is None else test_in
        best = torch.zeros_like(all_scores, dtype=torch.float64)
        for k in range(self.n_groups):
            p_k = conformal_pvalues(self.group_scores[self.members[k]].sort().values, all_scores.double())
            best = torch.where(test_in[:, k : k + 1], torch.maximum(best, p_k), best)
        return best

    def predict_set(self, z: Tensor, all_scores: Tensor, generator: torch.Generator | None = None,
                    test_in: Tensor | None = None) -> LabelSet:
        """``{y : max_k p_k(y) >= α} ∪ {y : p(y) >= α}`` for features ``(m, d)`` and label scores ``(m, K)``."""
        marginal = conformal_pvalues(self.scores, all_scores.double()) >= self.alpha
        return LabelSet(marginal | (self.group_pvalues(z, all_scores, generator, test_in) >= self.alpha))

    def forward(self, z: Tensor, all_scores: Tensor, generator: torch.Generator | None = None) -> LabelSet:
        """Alias of :meth:`predict_set`."""
        return self.predict_set(z, all_scores, generator)

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        names = ("scores", "group_scores", "members", "level")
        if prepare_state_load(self, state_dict, prefix, names, args[-1]):  # args[-1]: error_msgs
            super()._load_from_state_dict(state_dict, prefix, *args)
