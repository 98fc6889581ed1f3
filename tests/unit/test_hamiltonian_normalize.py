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


def test_moments_added_in_chunks_give_the_two_pass_statistics():
    from sciml.hamiltonian.nn.normalize import IrrepsMoments

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(50, 4, generator=gen, dtype=torch.float64) * 0.01 - 3.0  # a large mean: cancellation-prone
    types = torch.randint(0, 3, (50,), generator=gen)
    types[types == 2] = 0  # type 2 absent
    moments = IrrepsMoments(3, 4)
    for k in range(0, 50, 7):
        moments.add(x[k:k + 7], types[k:k + 7])
    mean, std = (torch.tensor(v, dtype=torch.float64) for v in moments.statistics(IRREPS))
    for t in (0, 1):
        xt = x[types == t]
        m = torch.cat([xt[:, :1].mean(0), torch.zeros(3, dtype=x.dtype)])  # the mean on the 0e component only
        dev = (xt - m) ** 2
        rms = torch.cat([dev[:, :1].mean().sqrt().reshape(1), dev[:, 1:].mean().sqrt().repeat(3)])
        torch.testing.assert_close(mean[t], m, rtol=0, atol=1e-14)
        torch.testing.assert_close(std[t], rms, rtol=1e-9, atol=0)
    assert torch.equal(std[2], torch.zeros(4)) and torch.equal(mean[2], torch.zeros(4))
