r"""UP-OCP: parameter-free online conformal prediction by universal-portfolio coin betting.

**Label: reconstruction.** UP-OCP (ICML 2026) is parameter-free via universal portfolios; the paper does not
state its exact update, so this module implements a reconstruction (``docs/calibration.md``):

.. math::

    g_t = α - 1[s_t > q_t], \qquad c_t = -g_t / \max(α, 1-α) \in [-1, 1], \\
    β_t = \frac{\int (2w-1) \prod_{i<t} (1 + (2w-1)c_i)\, dμ(w)}{\int \prod_{i<t}(1 + (2w-1)c_i)\, dμ(w)},
    \qquad q_t = q_0 + β_t W_{t-1}, \qquad W_t = W_{t-1}(1 + β_t c_t),

a Cover / Krichevsky–Trofimov universal-portfolio bettor with the ``Beta(½, ½)`` prior ``μ`` on ``w ∈ [0, 1]``,
evaluated on ``G`` midpoints ``w_k = (k + ½)/G`` in log space. ``W_t`` is then exactly the mixture wealth
``W_0 Σ_k π_k Π_i (1 + u_k c_i)``, ``u_k = 2w_k - 1``. No learning rate; ``W_0`` sets the unit of ``q``.

**Long-run coverage** (derived here). Scores in ``[0, B]``, ``q_0 ∈ [0, B]``: the wealth grows only while
``q_t`` lies between the scores and ``q_0``, by at most ``B_0 = max(B - q_0, q_0)`` per step, so
``W_T <= W_0 + T B_0``. With ``S = Σ c_t`` and the grid point nearest ``S/(2T)``,
``log(W_T/W_0) >= S²/(4T) - T/G² - L`` (``log(1+x) >= x - x²`` for ``x >= -0.68``; ``L = -log π_k`` the
largest negative log prior weight on ``|u| <= ½ + 1/G``). Hence for every ``T`` and any sequence

.. math::  \Big|\frac1T\sum_{t\le T}\mathrm{err}_t - α\Big| \le
           2\max(α, 1-α)\sqrt{\frac{\log(1 + T B_0/W_0) + L + T/G^2}{T}} = O\big(\sqrt{\log T / T}\big),

evaluated by :meth:`UPOCP.bound`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from .._checks import check_calibrator_dict, finite_real, float_list, is_int, positive_real
from ..split import CALIBRATORS
from .online import OnlineCalibrator, step_score

__all__ = ["UPOCP"]


class UPOCP(OnlineCalibrator):
    """UP-OCP reconstruction (universal-portfolio coin betting on the threshold); see the module docstring.

    Buffers: ``log_weights`` ``(G,)`` float64, the unnormalised log posterior ``log π_k + Σ log(1 + u_k c_i)``,
    and ``wealth`` ``W_{t-1}`` (0-dim float64).

    Parameters
    ----------
    score, alpha
        As in :class:`~sciml.uq.catalogue.online.QuantileTracker`.
    q0 : float
        Centre ``q_0`` of the bets (choose it in ``[0, B]``).
    wealth0 : float
        Initial wealth ``W_0 > 0`` in score units (about the score scale).
    grid : int
        Number ``G >= 10`` of grid points for the prior.

    """

    method = "up_ocp"

    def __init__(self, score: str = "absolute", alpha: float = 0.1, q0: float = 0.0, wealth0: float = 1.0,
                 grid: int = 2000) -> None:
        super().__init__(score, alpha)
        if not is_int(grid) or grid < 10:
            raise ValueError(f"'grid' must be an integer >= 10, got {grid!r}")
        self.q0, self.wealth0, self.grid = finite_real(q0, "q0"), positive_real(wealth0, "wealth0"), int(grid)
        w = (torch.arange(self.grid, dtype=torch.float64) + 0.5) / self.grid
        log_prior = -0.5 * (w * (1 - w)).log()
        self.register_buffer("u", 2 * w - 1, persistent=False)
        self.register_buffer("log_weights", log_prior - torch.logsumexp(log_prior, 0))
        self.register_buffer("wealth", torch.tensor(self.wealth0, dtype=torch.float64))

    def bet(self) -> float:
        """``β_t``: posterior mean of ``u = 2w - 1``, in ``(-1, 1)``."""
        return float((torch.softmax(self.log_weights, 0) * self.u).sum())

    def threshold(self) -> Tensor:
        """``q_t = q_0 + β_t W_{t-1}`` (0-dim float64)."""
        return torch.tensor(self.q0 + self.bet() * float(self.wealth), dtype=torch.float64)

    def update(self, score: float | Tensor) -> UPOCP:
        """Reveal ``s_t``: coin ``c_t = -(α - err_t)/max(α, 1-α)``, wealth and posterior updated."""
        beta = self.bet()
        err = float(step_score(score) > self.q0 + beta * float(self.wealth))
        c = -(self.alpha - err) / max(self.alpha, 1 - self.alpha)
        self.wealth.mul_(1 + beta * c)
        self.log_weights.add_(torch.log1p(self.u * c))
        self.log_weights.sub_(torch.logsumexp(self.log_weights, 0))  # normalised: β unchanged, no overflow
        return self

    def bound(self, t: int, b: float) -> float:
        """Long-run bound on ``|mean err - α|`` after ``T = t`` steps for scores in ``[0, b]`` (module docstring)."""
        b0 = max(b - self.q0, self.q0)
        w = (torch.arange(self.grid, dtype=torch.float64) + 0.5) / self.grid
        log_prior = -0.5 * (w * (1 - w)).log()
        log_prior = log_prior - torch.logsumexp(log_prior, 0)
        big_l = -float(log_prior[(2 * w - 1).abs() <= 0.5 + 1 / self.grid].min())
        inner = math.log1p(t * b0 / self.wealth0) + big_l + t / self.grid**2
        return 2 * max(self.alpha, 1 - self.alpha) * math.sqrt(inner / t)

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        lw = state_dict.get(prefix + "log_weights")
        if isinstance(lw, Tensor) and lw.shape != self.log_weights.shape:
            args[-1].append(f"{prefix}log_weights has shape {tuple(lw.shape)}, expected ({self.grid},)")
            return
        super()._load_from_state_dict(state_dict, prefix, *args)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable configuration and state (the log posterior on the grid and the wealth)."""
        return {"method": self.method, "score": self.score_name, "alpha": self.alpha, "q0": self.q0,
                "wealth0": self.wealth0, "grid": self.grid, "wealth": float(self.wealth),
                "log_weights": [float(v) for v in self.log_weights.tolist()]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> UPOCP:
        """Rebuild from :meth:`to_dict` output; ``ValueError`` on any malformed field."""
        keys = {"method", "score", "alpha", "q0", "wealth0", "grid", "wealth", "log_weights"}
        check_calibrator_dict(d, keys, cls.method)
        new = cls(d["score"], d["alpha"], d["q0"], d["wealth0"], d["grid"])
        lw = float_list(d["log_weights"], "log_weights")
        if len(lw) != new.grid:
            raise ValueError(f"'log_weights' holds {len(lw)} values, expected grid={new.grid}")
        new.log_weights = torch.tensor(lw, dtype=torch.float64)
        new.wealth.fill_(positive_real(d["wealth"], "wealth"))
        return new


CALIBRATORS[UPOCP.method] = UPOCP
