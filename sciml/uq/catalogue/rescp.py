r"""ResCP: reservoir conformal prediction for time series (ICLR 2026).

An echo-state network with fixed random weights (spectral radius ``ρ < 1``) summarises the past,

.. math::  h_t = (1 - l) h_{t-1} + l \tanh(W_x x_t + W_h h_{t-1}),

and the residuals ``r_s = y_s - ŷ_s`` of a FIFO window of past steps get the weights

.. math::  w_s \propto \operatorname{softmax}_s\big(\cos(h_t, h_s)/τ\big) \cdot \frac{1}{t - s},

normalised to sum to 1. With ``Q_w`` the weighted ECDF quantile (smallest residual whose cumulative weight
reaches the level) the interval is ``[ŷ_t + Q_w(β*), ŷ_t + Q_w(1 - α + β*)]`` with ``β*`` the value on a grid
of ``[0, α]`` that minimises the width. Coverage is asymptotic and conditional (on the reservoir state) only:
there is no finite-sample guarantee; pair it with an online method (ACI, PID) when one is needed.

**Deviation from the paper's weights.** The paper's weights are ``decay = 1``, ``test_mass = 0``.
The ``1/(t-s)`` factor concentrates the weights (effective sample ``(Σ 1/k)²/Σ 1/k² ≈ 21`` for a 200-window),
and that ECDF under-covers: 0.72 long-run coverage at ``α = 0.1`` on i.i.d. Gaussian residuals (0.78 with
``τ = 0.3``). Defaults here are ``decay = 0.5``, ``τ = 1`` and a test-point mass ``test_mass = 0.2`` (the
non-exchangeable correction of Barber, Candès, Ramdas, Tibshirani 2023): 0.90 on the same stream.
``ResCP(decay=1, test_mass=0, tau=0.1)`` is the paper's rule.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .._checks import finite_real, is_int, positive_real, prepare_state_load
from ..quantile import check_alpha, weighted_quantile
from ..sets import Interval

__all__ = ["ResCP"]


class ResCP(nn.Module):
    """Reservoir-weighted residual quantiles; call :meth:`step`, :meth:`predict_set`, then :meth:`update`.

    Buffers: ``w_in`` ``(units, n_inputs)``, ``w_res`` ``(units, units)``, state ``h`` ``(units,)``, and the
    window ``hist_h`` ``(≤ window, units)``, ``hist_r`` residuals, ``hist_t`` time stamps; ``t`` step count.

    Parameters
    ----------
    n_inputs : int
        Size of the reservoir input ``x_t`` (e.g. lagged residuals or covariates known before ``y_t``).
    alpha : float
        Target miscoverage.
    window : int
        FIFO length of past residuals.
    units, leak, rho, tau : int, float, float, float
        Reservoir size, leak ``l ∈ (0, 1]``, spectral radius ``ρ ∈ (0, 1)``, softmax temperature ``τ > 0``.
    n_beta : int
        Grid size for ``β ∈ [0, α]``.
    seed : int
        Seed of the fixed random weights.

    """

    def __init__(self, n_inputs: int = 1, alpha: float = 0.1, window: int = 200, units: int = 32, leak: float = 0.5,
                 rho: float = 0.9, tau: float = 1.0, n_beta: int = 11, seed: int = 0,
                 decay: float = 0.5, test_mass: float = 0.2) -> None:
        super().__init__()
        if not all(is_int(v) and v >= 1 for v in (n_inputs, window, units, n_beta)):
            raise ValueError("n_inputs, window, units and n_beta must be positive integers")
        self.alpha, self.window, self.n_beta = check_alpha(alpha), int(window), int(n_beta)
        self.leak, self.tau = finite_real(leak, "leak"), positive_real(tau, "tau")
        self.decay, self.test_mass = finite_real(decay, "decay"), finite_real(test_mass, "test_mass")
        if self.decay < 0 or self.test_mass < 0:
            raise ValueError(f"'decay' and 'test_mass' must be >= 0, got {decay!r}, {test_mass!r}")
        rho = finite_real(rho, "rho")
        if not (0 < self.leak <= 1 and 0 < rho < 1):
            raise ValueError(f"need leak in (0, 1] and rho in (0, 1), got {leak!r}, {rho!r}")
        gen = torch.Generator().manual_seed(int(seed))
        w_res = torch.randn(units, units, generator=gen, dtype=torch.float64)
        w_res *= rho / torch.linalg.eigvals(w_res).abs().max()
        self.register_buffer("w_in", torch.randn(units, n_inputs, generator=gen, dtype=torch.float64))
        self.register_buffer("w_res", w_res)
        self.register_buffer("h", torch.zeros(units, dtype=torch.float64))
        self.register_buffer("hist_h", torch.empty(0, units, dtype=torch.float64))
        self.register_buffer("hist_r", torch.empty(0, dtype=torch.float64))
        self.register_buffer("hist_t", torch.empty(0, dtype=torch.float64))
        self.register_buffer("t", torch.tensor(0.0, dtype=torch.float64))

    def step(self, x: Tensor) -> ResCP:
        """Advance the reservoir with the input ``x_t`` ``(n_inputs,)`` known before ``y_t``."""
        x = torch.as_tensor(x, dtype=torch.float64).reshape(-1)
        if x.numel() != self.w_in.shape[1] or not torch.isfinite(x).all():
            raise ValueError(f"reservoir input must be {self.w_in.shape[1]} finite numbers, got {x.tolist()}")
        self.h = (1 - self.leak) * self.h + self.leak * torch.tanh(self.w_in @ x + self.w_res @ self.h)
        self.t += 1
        return self

    def weights(self) -> Tensor:
        """Weights of the window residuals and, last, of the test point, shape ``(n + 1,)``, summing to 1.

        Unnormalised weights ``exp(cos(h_t, h_s)/τ) (t - s)^{-decay}``; the test point gets ``test_mass`` times
        the largest of them, the mass that the non-exchangeable conformal correction of Barber et al. (2023)
        puts at ``±∞``.
        """
        cos = torch.nn.functional.cosine_similarity(self.hist_h, self.h.unsqueeze(0), dim=-1)
        logw = cos / self.tau - self.decay * torch.log(self.t - self.hist_t)
        test = logw.max() + math.log(self.test_mass) if self.test_mass > 0 else logw.new_tensor(-math.inf)
        logw = torch.cat([logw, test.reshape(1)])
        return torch.softmax(logw, 0)

    def offsets(self) -> tuple[float, float]:
        """``(Q_w(β*), Q_w(1-α+β*))`` minimising the width; ``(-inf, inf)`` before any residual."""
        if self.hist_r.numel() == 0:
            return -math.inf, math.inf
        betas = torch.linspace(0, self.alpha, self.n_beta, dtype=torch.float64)
        w = self.weights()
        inf = self.hist_r.new_tensor([math.inf])
        lo = -weighted_quantile(torch.cat([-self.hist_r, inf]), w, 1 - betas)  # test mass at -inf
        hi = weighted_quantile(torch.cat([self.hist_r, inf]), w, 1 - self.alpha + betas)  # test mass at +inf
        best = int(torch.argmin(hi - lo))
        return float(lo[best]), float(hi[best])

    def predict_set(self, pred: Tensor) -> Interval:
        """Interval ``[ŷ + Q_w(β*), ŷ + Q_w(1-α+β*)]`` for the current step (``pred`` any shape)."""
        lo, hi = self.offsets()
        return Interval(pred + lo, pred + hi)

    def forward(self, pred: Tensor) -> Interval:
        """Alias of :meth:`predict_set`."""
        return self.predict_set(pred)

    def update(self, residual: float | Tensor) -> ResCP:
        """Reveal ``r_t = y_t - ŷ_t`` and push ``(h_t, r_t, t)`` into the window."""
        r = finite_real(float(residual), "residual")
        self.hist_h = torch.cat([self.hist_h, self.h.unsqueeze(0)])[-self.window:]
        self.hist_r = torch.cat([self.hist_r, self.hist_r.new_tensor([r])])[-self.window:]
        self.hist_t = torch.cat([self.hist_t, self.t.reshape(1)])[-self.window:]
        return self

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        if prepare_state_load(self, state_dict, prefix, ("hist_h", "hist_r", "hist_t"), args[-1]):
            super()._load_from_state_dict(state_dict, prefix, *args)

    def run(self, preds: Tensor, ys: Tensor, features: Tensor | None = None) -> Interval:
        """Whole series: ``step`` (input ``features[t]``, default the previous residual), predict, update.

        ``preds``, ``ys`` have shape ``(T,)``; ``features`` ``(T, n_inputs)``. Returns the ``(T,)`` intervals.
        """
        lower, upper, prev = [], [], 0.0
        for t in range(preds.numel()):
            self.step(features[t] if features is not None else torch.tensor([prev]))
            lo, hi = self.offsets()
            lower.append(float(preds[t]) + lo)
            upper.append(float(preds[t]) + hi)
            prev = float(ys[t] - preds[t])
            self.update(prev)
        return Interval(torch.tensor(lower, dtype=torch.float64), torch.tensor(upper, dtype=torch.float64))
