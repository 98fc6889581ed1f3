r"""SNAP-UQ: single-pass uncertainty from next-activation prediction on tapped layers (ICLR 2026).

Forward hooks record the pooled
activation ``a_l(x) ∈ R^{d_l}`` of ``L`` tapped layers (mean over every axis between the batch axis and the
feature axis). For each consecutive pair a small head predicts the next activation from a rank-``r``
projection of the previous, as a diagonal Gaussian:

.. math::  μ_l, \log σ_l^2 = H_l(P_l a_l), \qquad
           S(x) = \frac{1}{L-1}\sum_{l} \frac{1}{d_{l+1}}\big\|(a_{l+1} - μ_l)/σ_l\big\|^2,

the surprisal, trained by the Gaussian negative log-likelihood on in-distribution inputs with the network
frozen (activations detached). A monotone calibrator (isotonic regression, pool-adjacent-violators) maps
``S`` to the mean absolute residual, so :meth:`SnapUQ.sigma` can be ``σ(x)`` in the ``normalized`` conformal
score (coverage then holds by the conformal argument, whatever the quality of ``S``), a Mondrian group
feature, or a selective-prediction score. The paper's optional confidence proxy input to the calibrator is
not used here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from .._checks import is_int

__all__ = ["SnapUQ", "isotonic_fit", "isotonic_predict"]


def isotonic_fit(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """Non-decreasing least-squares fit of ``y`` on ``x`` (pool adjacent violators); knots ``(xs, fitted)``."""
    order = torch.argsort(x)
    xs, ys = x[order].double(), y[order].double().tolist()
    blocks: list[list[float]] = []  # [sum, count]
    for v in ys:
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    fitted = torch.cat([torch.full((int(c),), s / c, dtype=torch.float64) for s, c in blocks])
    return xs, fitted


def isotonic_predict(knots_x: Tensor, knots_y: Tensor, x: Tensor) -> Tensor:
    """Piecewise-constant evaluation of an isotonic fit (value of the largest knot ``<= x``, ends clamped)."""
    idx = (torch.searchsorted(knots_x, x.double().contiguous(), right=True) - 1).clamp(0, knots_x.numel() - 1)
    return knots_y[idx]


def _pool(a: Tensor) -> Tensor:
    return a.flatten(1, -2).mean(1) if a.dim() > 2 else a


class SnapUQ(nn.Module):
    """Next-activation heads on ``taps`` of ``model`` plus an isotonic calibrator (module docstring).

    Parameters
    ----------
    model : nn.Module
        The (trained) network; it is not modified and not part of this module's parameters.
    taps : list of str
        Names of ``>= 2`` submodules (``model.named_modules()``) whose outputs are ``(batch, ..., d_l)``.
    dims : list of int
        Feature size ``d_l`` of each tap.
    rank : int
        Rank ``r`` of the projections ``P_l``.
    pool : callable, optional
        ``pool(activation, x) -> (n, d_l)``: per-example pooling of a tap's output for the model input ``x``
        (default: mean over the axes between batch and features). Graph models pass e.g. a mean over each
        graph's nodes, ``lambda a, batch: torch_geometric.utils.scatter(a, batch.batch, reduce="mean")``.

    Notes
    -----
    Buffers ``knots_x``, ``knots_y`` hold the isotonic calibrator, empty before :meth:`calibrate`.

    """

    def __init__(self, model: nn.Module, taps: list[str], dims: list[int], rank: int = 8,
                 pool: Callable[[Tensor, Any], Tensor] | None = None) -> None:
        super().__init__()
        modules = dict(model.named_modules())
        if len(taps) < 2 or len(taps) != len(dims) or any(t not in modules for t in taps):
            raise ValueError(f"taps must name >= 2 submodules with one size each; known: {list(modules)[:20]}")
        if not is_int(rank) or rank < 1:
            raise ValueError(f"'rank' must be a positive integer, got {rank!r}")
        self._model, self.taps = [model], list(taps)  # list: keep the model out of this module's parameters
        self.pool = pool or (lambda a, _x: _pool(a))
        self.proj = nn.ModuleList(nn.Linear(d, rank, bias=False) for d in dims[:-1])
        self.heads = nn.ModuleList(nn.Linear(rank, 2 * d) for d in dims[1:])
        self.register_buffer("knots_x", torch.empty(0, dtype=torch.float64))
        self.register_buffer("knots_y", torch.empty(0, dtype=torch.float64))

    def activations(self, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        """Run the model once; return its output and the pooled, detached tap activations ``[(n, d_l)]``."""
        acts: dict[str, Tensor] = {}
        modules = dict(self._model[0].named_modules())
        hooks = [modules[t].register_forward_hook(lambda _m, _i, out, t=t: acts.__setitem__(t, out))
                 for t in self.taps]
        try:
            out = self._model[0](x)
        finally:
            for h in hooks:
                h.remove()
        return out, [self.pool(acts[t], x).detach() for t in self.taps]

    def _terms(self, acts: list[Tensor]) -> tuple[Tensor, Tensor]:
        nll, surprisal = 0.0, 0.0
        for p, h, a, b in zip(self.proj, self.heads, acts[:-1], acts[1:], strict=True):
            mu, logvar = h(p(a.to(p.weight.dtype))).chunk(2, dim=-1)
            z2 = (b.to(mu.dtype) - mu) ** 2 * torch.exp(-logvar)
            nll = nll + (z2 + logvar).mean()
            surprisal = surprisal + z2.mean(-1)
        return nll / len(self.heads), surprisal / len(self.heads)

    def fit_heads(self, x: Tensor, epochs: int = 200, lr: float = 1e-2) -> SnapUQ:
        """Train the heads by Gaussian NLL on in-distribution inputs ``x`` (full batch, Adam)."""
        with torch.no_grad():
            _, acts = self.activations(x)
        opt = torch.optim.Adam(self.parameters(), lr=lr)
        for _ in range(epochs):
            loss = self._terms(acts)[0]
            opt.zero_grad()
            loss.backward()
            opt.step()
        return self

    @torch.no_grad()
    def surprisal(self, x: Tensor) -> Tensor:
        """``S(x)``, shape ``(n,)``: mean standardised next-activation error over the tap pairs."""
        return self._terms(self.activations(x)[1])[1].double()

    @torch.no_grad()
    def calibrate(self, x: Tensor, abs_residual: Tensor) -> SnapUQ:
        """Fit the isotonic map ``S -> |y - ŷ|`` on held-out inputs ``x`` and residuals ``(n,)``."""
        self.knots_x, self.knots_y = isotonic_fit(self.surprisal(x), abs_residual)
        return self

    @torch.no_grad()
    def sigma(self, x: Tensor, floor: float = 1e-6) -> Tensor:
        """``σ(x) = max(iso(S(x)), floor)``, shape ``(n,)`` float64, for the ``normalized`` score."""
        if self.knots_x.numel() == 0:
            raise RuntimeError("SnapUQ is not calibrated; call calibrate(x, abs_residual) first")
        return isotonic_predict(self.knots_x, self.knots_y, self.surprisal(x)).clamp_min(floor)
