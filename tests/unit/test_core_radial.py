"""Smooth cutoff envelope of :mod:`sciml.core.radial` (values at the ends and continuity of the slope)."""

from __future__ import annotations

import pytest
import torch

from sciml.core.radial import CosineCutoff


@pytest.mark.parametrize("onset", [0.0, 1.5])
def test_cosine_cutoff_is_one_before_onset_zero_after_cutoff_and_smooth(onset):
    """``w = 1`` up to the onset, ``½`` halfway, 0 from the cutoff on; ``w'`` → 0 at both ends (finite differences)."""
    env = CosineCutoff(3.0, onset)
    r = torch.tensor([0.0, onset, (onset + 3.0) / 2, 3.0, 4.0], dtype=torch.float64)
    assert torch.allclose(env(r), torch.tensor([1.0, 1.0, 0.5, 0.0, 0.0], dtype=torch.float64), atol=1e-15)
    h = 1e-6
    for end in (onset, 3.0):
        ends = torch.tensor([end - h, end + h], dtype=torch.float64)
        slope = (env(ends)[1] - env(ends)[0]) / 2 / h
        assert abs(float(slope)) < 1e-5  # |w'| = (π/2)|sin(πx)|/Δ ≈ π²h/(2Δ²) this close to an end
    with pytest.raises(ValueError, match="onset < cutoff"):
        CosineCutoff(2.0, 2.0)
