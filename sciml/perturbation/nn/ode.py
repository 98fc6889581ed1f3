"""Fixed-step ODE integrators for sampling the flow (explicit Euler, order 1; classical RK4, order 4)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

VectorField = Callable[[Tensor, Tensor], Tensor]


def euler_step(f: VectorField, x: Tensor, t: Tensor, h: float) -> Tensor:
    """``x + h·f(x, t)``."""
    return x + h * f(x, t)


def rk4_step(f: VectorField, x: Tensor, t: Tensor, h: float) -> Tensor:
    """Classical Runge–Kutta: ``x + h/6·(k1 + 2k2 + 2k3 + k4)``."""
    k1 = f(x, t)
    k2 = f(x + 0.5 * h * k1, t + 0.5 * h)
    k3 = f(x + 0.5 * h * k2, t + 0.5 * h)
    k4 = f(x + h * k3, t + h)
    return x + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)


STEPPERS = {"euler": euler_step, "rk4": rk4_step}


def integrate(f: VectorField, x0: Tensor, steps: int = 20, method: str = "rk4", t0: float = 0.0,
              t1: float = 1.0) -> Tensor:
    """Solve ``dx/dt = f(x, t)`` from ``t0`` to ``t1`` in ``steps`` equal steps; returns ``x(t1)``.

    ``f`` receives ``x`` and a 0-dim tensor ``t``. Global error ``O(h)`` for ``euler``, ``O(h⁴)`` for ``rk4``.
    """
    if method not in STEPPERS:
        raise ValueError(f"unknown ODE method {method!r}; known: {sorted(STEPPERS)}")
    if int(steps) < 1:
        raise ValueError(f"ODE steps must be >= 1, got {steps}")
    h = (t1 - t0) / int(steps)
    x = x0
    for i in range(int(steps)):
        x = STEPPERS[method](f, x, torch.tensor(t0 + i * h, dtype=x0.dtype, device=x0.device), h)
    return x
