"""DomainScore: flag rate and super-uniform p-values on exchangeable data, power on shifted data, artifacts, errors."""

from __future__ import annotations

import json
import math
from functools import cache

import pytest
import torch

from sciml.uq import DomainScore

D, N_TRAIN, N_CAL, N_TEST, SEEDS, BETA = 8, 600, 199, 500, 20, 0.05


def _mixture(n: int, g: torch.Generator, shift: float = 0.0) -> torch.Tensor:
    """Three correlated Gaussian clusters in ``R^D`` (fixed layout), optionally shifted by ``shift`` in every axis."""
    layout = torch.Generator().manual_seed(1234)
    centres = 3 * torch.randn(3, D, generator=layout, dtype=torch.float64)
    mix = torch.randn(3, D, D, generator=layout, dtype=torch.float64) / math.sqrt(D)
    comp = torch.randint(0, 3, (n,), generator=g)
    eps = torch.randn(n, D, 1, generator=g, dtype=torch.float64)
    return centres[comp] + (mix[comp] @ eps).squeeze(-1) + shift


@cache
def _exchangeable_pvalues() -> torch.Tensor:
    """P-values of exchangeable test points, shape ``(SEEDS, N_TEST)``; a fresh train/calib/test draw per seed."""
    out = []
    for seed in range(SEEDS):
        g = torch.Generator().manual_seed(seed)
        ds = DomainScore(k=5, max_reference=300, beta=BETA).fit(_mixture(N_TRAIN, g), _mixture(N_CAL, g), seed=seed)
        out.append(ds.pvalue(_mixture(N_TEST, g)))
    return torch.stack(out)


def _tolerance(u: float) -> float:
    """3 sd of the mean over seeds of P(p <= u): binomial over test points plus the calibration draw.

    Given the calibration set the rejection probability is Beta-distributed with variance ~u(1-u)/(n_cal+2);
    given that, the rate over N_TEST points adds u(1-u)/N_TEST.
    """
    return 3 * math.sqrt(u * (1 - u) * (1 / N_TEST + 1 / (N_CAL + 2)) / SEEDS)


def test_flag_rate_at_most_beta_on_exchangeable_data() -> None:
    """An exchangeable input is flagged with probability floor(β(n+1))/(n+1) <= β (here exactly 10/200)."""
    p = _exchangeable_pvalues()
    rate = float((p <= BETA).double().mean())
    exact = math.floor(BETA * (N_CAL + 1)) / (N_CAL + 1)
    assert rate <= BETA + _tolerance(BETA), rate
    assert abs(rate - exact) <= _tolerance(BETA), (rate, exact)  # not vacuously conservative either


@pytest.mark.parametrize("u", [0.01, 0.1, 0.25, 0.5, 0.9])
def test_pvalues_are_super_uniform(u: float) -> None:
    """P(p <= u) = floor(u(n+1))/(n+1) <= u for continuous scores; checked to binomial tolerance."""
    rate = float((_exchangeable_pvalues() <= u).double().mean())
    exact = math.floor(u * (N_CAL + 1) + 1e-9) / (N_CAL + 1)
    assert rate <= u + _tolerance(u), rate
    assert abs(rate - exact) <= _tolerance(u), (rate, exact)


def test_far_shifted_inputs_are_flagged() -> None:
    """Inputs shifted by 2 in every axis (about 2 cluster widths) are flagged at >= 95 %; the score orders them."""
    g = torch.Generator().manual_seed(5)
    ds = DomainScore().fit(_mixture(N_TRAIN, g), _mixture(N_CAL, g))
    inside, outside = _mixture(N_TEST, g), _mixture(N_TEST, g, shift=2.0)
    assert float(ds.flag(outside).double().mean()) >= 0.95
    assert float(ds.flag(inside).double().mean()) <= 0.15  # beta + ~7 sd of one calibration draw
    assert float(ds.score(outside).median()) > float(ds.score(inside).quantile(0.99))


def test_flag_respects_beta_argument() -> None:
    """A larger beta flags a superset; the default is the fitted beta."""
    g = torch.Generator().manual_seed(2)
    ds = DomainScore(beta=0.1).fit(_mixture(N_TRAIN, g), _mixture(N_CAL, g))
    x = _mixture(N_TEST, g, shift=0.5)
    assert torch.equal(ds.flag(x), ds.pvalue(x) <= 0.1)
    assert bool((ds.flag(x, beta=0.2) | ~ds.flag(x, beta=0.05)).all())


def test_round_trip_json_and_state_dict_give_identical_pvalues() -> None:
    """to_dict -> JSON -> from_dict and state_dict -> fresh module give bit-identical p-values."""
    g = torch.Generator().manual_seed(3)
    ds = DomainScore(k=3, max_reference=100).fit(_mixture(N_TRAIN, g), _mixture(N_CAL, g), seed=9)
    x = _mixture(50, g, shift=0.7)
    loaded = DomainScore.from_dict(json.loads(json.dumps(ds.to_dict())))
    assert torch.equal(loaded.pvalue(x), ds.pvalue(x))
    assert (loaded.k, loaded.beta, loaded.n_train) == (3, 0.05, N_TRAIN)
    fresh = DomainScore(k=3, max_reference=100)
    fresh.load_state_dict(ds.state_dict())
    assert torch.equal(fresh.pvalue(x), ds.pvalue(x))
    assert fresh.to_dict() == ds.to_dict()


def test_state_is_bounded_and_small_training_sets_kept_whole() -> None:
    """The coreset holds min(n_train, max_reference) rows; the artifact holds nothing that grows with n_train."""
    g = torch.Generator().manual_seed(4)
    d = DomainScore(max_reference=100).fit(_mixture(N_TRAIN, g), _mixture(N_CAL, g)).to_dict()
    assert len(d["reference"]) == 100 and all(len(r) == D for r in d["reference"])
    assert len(d["cal_scores"]) == N_CAL and d["cal_scores"] == sorted(d["cal_scores"])
    small = DomainScore(max_reference=100).fit(_mixture(40, g), _mixture(N_CAL, g))
    assert small.reference.shape == (40, D)


def test_float32_embeddings_are_accepted() -> None:
    """float32 inputs are promoted to float64: same result as passing the promoted tensor."""
    g = torch.Generator().manual_seed(6)
    ds = DomainScore().fit(_mixture(N_TRAIN, g).float(), _mixture(N_CAL, g).float())
    x = _mixture(20, g).float()
    assert torch.equal(ds.pvalue(x), ds.pvalue(x.double()))


def _fitted() -> DomainScore:
    g = torch.Generator().manual_seed(8)
    return DomainScore().fit(_mixture(200, g), _mixture(40, g))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda ds: ds.pvalue(torch.zeros(3, D + 1, dtype=torch.float64)), "d=9"),
        (lambda ds: ds.pvalue(torch.full((2, D), math.nan, dtype=torch.float64)), "NaN"),
        (lambda ds: ds.pvalue(torch.zeros(D, dtype=torch.float64)), r"shape \(n, d\)"),
        (lambda ds: ds.pvalue(torch.zeros(3, D, dtype=torch.int64)), "floating"),
        (lambda ds: ds.flag(torch.zeros(3, D, dtype=torch.float64), beta=0.01), r"1/\(n_cal\+1\) = 1/41"),
        (lambda ds: ds.flag(torch.zeros(3, D, dtype=torch.float64), beta=1.5), "alpha"),
    ],
)
def test_bad_inputs_raise(call, match: str) -> None:
    """Wrong dimension, NaN, wrong rank or dtype, infeasible beta: one clear ValueError each."""
    with pytest.raises(ValueError, match=match):
        call(_fitted())


def test_fit_errors() -> None:
    """Too few calibration points for beta, training data reused as calibration, bad k, unfitted use."""
    g = torch.Generator().manual_seed(10)
    train = _mixture(100, g)
    with pytest.raises(ValueError, match=r"smallest possible p-value 1/\(n_cal\+1\) = 1/11.*at least 19"):
        DomainScore(beta=0.05).fit(train, _mixture(10, g))
    with pytest.raises(ValueError, match="held out"):
        DomainScore().fit(train, train[:50])
    with pytest.raises(ValueError, match="dimension"):
        DomainScore().fit(train, _mixture(30, g)[:, :3])
    with pytest.raises(ValueError, match="at least"):
        DomainScore(k=5).fit(train[:4], _mixture(30, g))
    with pytest.raises(ValueError, match="k must be"):
        DomainScore(k=0)
    with pytest.raises(ValueError, match="max_reference"):
        DomainScore(k=5, max_reference=3)
    with pytest.raises(RuntimeError, match="not fitted"):
        DomainScore().pvalue(train)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda d: d.update(format_version=2), "format_version 2"),
        (lambda d: d.pop("cal_scores"), "missing"),
        (lambda d: d.update(method="split"), "method"),
        (lambda d: d.update(reference=[r[:-1] for r in d["reference"]]), "rows, each a list of d=8"),
        (lambda d: d.update(reference=[["a"] * D for _ in d["reference"]]), "numbers only"),
        (lambda d: d["reference"][0].__setitem__(0, math.nan), "finite"),
        (lambda d: d.update(max_reference=len(d["reference"]) - 1), "max_reference"),
        (lambda d: d["scale"].__setitem__(0, -1.0), "scale > 0"),
        (lambda d: d.update(cal_scores=d["cal_scores"][:5]), "smallest possible p-value"),
        (lambda d: d.update(n_train="many"), "n_train"),
        (lambda d: d.update(k=True), "k must be"),
    ],
)
def test_from_dict_validates(edit, match: str) -> None:
    """Every corrupted field of a stored domain score is refused with a message naming it."""
    d = json.loads(json.dumps(_fitted().to_dict()))
    edit(d)
    with pytest.raises(ValueError, match=match):
        DomainScore.from_dict(d)
