r"""Per-gene combination rule for double perturbations: a small MLP shared by all genes.

``Δ̂_ab,g = Δ_a,g + Δ_b,g + f_φ(Δ_a,g + Δ_b,g, min, max, Δ_a,g·Δ_b,g, μ_0,g)`` with standardised, symmetric
features (the order of the two genes does not matter), fitted on the training doubles by full-batch Adam on the
squared error. The untrained rule (``f_φ ≡ 0`` at the zero-initialised last layer) is the additive model. It is
the torch counterpart of :class:`sciml.perturbation.baselines.combination.LearnedCombination` (a boosted per-gene
rule on the same features), kept as parameters/buffers so it is saved in safetensors with the flow model.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

N_FEATURES = 5
FIT_ENTRIES = 50_000  # (double, gene) entries the rule is fitted on at most (a seeded subsample beyond)


def combination_features(da: Tensor, db: Tensor, mu0: Tensor) -> Tensor:
    """Symmetric per-gene features ``(..., G, 5)``: sum, min, max, product of ``Δ_a, Δ_b`` ``(..., G)``, and ``μ_0``."""
    mu0 = mu0.expand_as(da)
    return torch.stack([da + db, torch.minimum(da, db), torch.maximum(da, db), da * db, mu0], -1)


class CombinationRule(nn.Module):
    """Shared per-gene MLP ``f_φ`` on :func:`combination_features` added to the additive effect.

    Parameters
    ----------
    hidden : int
        Hidden width of the two-layer SiLU MLP.

    """

    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(N_FEATURES, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                 nn.Linear(hidden, 1))
        nn.init.zeros_(self.mlp[-1].weight)
        nn.init.zeros_(self.mlp[-1].bias)
        self.register_buffer("loc", torch.zeros(N_FEATURES))
        self.register_buffer("scale", torch.ones(N_FEATURES))

    def forward(self, da: Tensor, db: Tensor, mu0: Tensor) -> Tensor:
        """Predicted double effect ``(..., G)`` from single effects ``da``, ``db`` ``(..., G)`` and ``mu0`` ``(G,)``."""
        return da + db + self.correction(combination_features(da, db, mu0)).squeeze(-1)

    def correction(self, feats: Tensor) -> Tensor:
        """``f_φ`` ``(..., 1)`` of unstandardised features ``(..., 5)``."""
        return self.mlp((feats - self.loc) / self.scale)

    def fit(self, da: Tensor, db: Tensor, mu0: Tensor, target: Tensor, steps: int = 600, lr: float = 1e-2,
            weight_decay: float = 1e-4, seed: int = 0, max_entries: int | None = FIT_ENTRIES) -> float:
        """Fit on ``D`` training doubles: ``da``, ``db``, ``target`` ``(D, G)``, ``mu0`` ``(G,)``; return final MSE.

        Deterministic (seeded re-initialisation of the hidden layers, full-batch AdamW with cosine decay). The rule
        is one small MLP shared by every (double, gene) entry: over ``max_entries`` entries (a wide panel) it is
        fitted on that many of them, drawn with the seed (``None``: all); its cost then no longer grows with the
        panel's width (what it costs in accuracy: docs/benchmarks.md, "Perturbation at width").
        """
        gen = torch.Generator().manual_seed(seed)
        feats = combination_features(da, db, mu0).reshape(-1, N_FEATURES)
        target = target.reshape(-1, 1)
        if max_entries is not None and len(feats) > max_entries:
            keep = torch.randperm(len(feats), generator=torch.Generator().manual_seed(seed))[:max_entries]
            feats, target = feats[keep], target[keep]
        self.loc.copy_(feats.mean(0))
        self.scale.copy_(feats.std(0).clamp_min(1e-6))
        with torch.no_grad():
            for layer in self.mlp[:-1]:
                if isinstance(layer, nn.Linear):
                    bound = layer.in_features ** -0.5
                    layer.weight.copy_(torch.rand(layer.weight.shape, generator=gen) * 2 * bound - bound)
                    layer.bias.zero_()
        opt = torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=weight_decay)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
        with torch.enable_grad():
            for _ in range(steps):
                opt.zero_grad()
                loss = (feats[:, :1] + self.correction(feats) - target).pow(2).mean()  # Δa + Δb + f_φ − Δab
                loss.backward()
                opt.step()
                sched.step()
        return float(loss.detach())
