"""Per-type irreps normalisation: trained types round-trip, a type absent from training stays dead."""

from __future__ import annotations

import torch

from sciml.hamiltonian.nn.normalize import IrrepsNormalizer

IRREPS = "1x0e+1x1o"


def test_absent_type_predicts_no_correction():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(20, 4, generator=gen, dtype=torch.float64) * 0.3 + 0.1
    types = torch.zeros(20, dtype=torch.long)  # type 1 never seen in training
    norm = IrrepsNormalizer(*IrrepsNormalizer.statistics(x, types, IRREPS, n_types=2))
    torch.testing.assert_close(norm.denormalize(norm.normalize(x, types), types), x)
    assert not norm.alive()[1].any() and norm.alive()[0].all()
    big = torch.full((3, 4), 5.0, dtype=torch.float64)  # an untrained network output of any size
    out = norm.denormalize(big, torch.ones(3, dtype=torch.long))
    assert torch.equal(out, torch.zeros_like(out))  # no correction: the model keeps H0 for that type
    assert torch.equal(norm.normalize(big, torch.ones(3, dtype=torch.long)), torch.zeros_like(big))
