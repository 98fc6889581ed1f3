"""The joint singles of ``benchmarks/perturbation_joint_singles.py`` (a lead for issue 14): exact cases of the GLS.

Without doubles the estimate is the measured singles; with consistent, noise-free additive doubles (no interaction,
so ``τ² = 0``) it is the true singles, and every single seen in a double gets a smaller variance than its own.
"""

from __future__ import annotations

import itertools

import torch


def test_joint_singles_are_the_singles_without_doubles_and_exact_on_additive_doubles(load_benchmark):
    joint_singles = load_benchmark("perturbation_joint_singles").joint_singles
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
