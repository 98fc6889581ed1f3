"""Vector and matrix scores: simultaneous coverage of sup-norm boxes and Mahalanobis ellipsoids, sets, state."""

from __future__ import annotations

import json
import math

import pytest
import torch

from sciml.uq import (
    VECTOR_SCORES,
    Box,
    Ellipsoid,
    Mahalanobis,
    PredictionSet,
    SupNorm,
    conformal_quantile,
    conformal_rank,
    upper_triangle,
    vector_score_from_dict,
)

torch.set_num_threads(1)
ALPHA = 0.1
MIX = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.8, 0.6, 0.0, 0.0], [0.3, 0.2, 2.0, 0.0], [0.0, 0.5, 0.5, 0.1]])


def _beta_se(n: int, m: int, trials: int) -> tuple[float, float]:
    """Mean k/(n+1) and SE of the trial-averaged coverage: Var = Var(Beta(k, n+1-k)) + (p(1-p) - Var)/m."""
    k = conformal_rank(n, ALPHA)
    p, var_c = k / (n + 1), k * (n + 1 - k) / ((n + 1) ** 2 * (n + 2))
    return p, math.sqrt((var_c + (p * (1 - p) - var_c) / m) / trials)


def _vectors(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Correlated, heavy-tailed (Student-t, 4 dof) residuals in d=4 around random predictions."""
    pred = torch.randn(n, 4, generator=g, dtype=torch.float64)
    chi2 = torch.randn(n, 4, generator=g, dtype=torch.float64).pow(2).sum(-1, keepdim=True)
    t = torch.randn(n, 4, generator=g, dtype=torch.float64) / (chi2 / 4).sqrt()
    return pred, pred + t @ MIX.T.double()


def _matrices(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric 3x3 targets: symmetric noise whose diagonal is 3x larger than the off-diagonal."""
    pred = torch.randn(n, 3, 3, generator=g, dtype=torch.float64)
    noise = torch.randn(n, 3, 3, generator=g, dtype=torch.float64)
    noise = (noise + noise.transpose(-1, -2)) / 2 + torch.diag_embed(2 * noise.diagonal(dim1=-2, dim2=-1))
    return pred + pred.transpose(-1, -2), pred + pred.transpose(-1, -2) + noise


@pytest.mark.parametrize("name", ["supnorm", "mahalanobis"])
@pytest.mark.parametrize(("kind", "n"), [("vector", 19), ("vector", 50), ("symmetric", 30)])
def test_simultaneous_coverage(name: str, kind: str, n: int) -> None:
    """All components covered at once with mean probability k/(n+1), within 3 SE over 600 seeded trials."""
    trials, n_fit, m = 600, 40, 40
    g = torch.Generator().manual_seed(1000 * n + len(name) + len(kind))
    draw = _vectors if kind == "vector" else _matrices
    hits = 0.0
    for _ in range(trials):
        score = VECTOR_SCORES[name](symmetric=kind == "symmetric")
        score.fit(*draw(n_fit, g))  # fit split: per-dimension scales / covariance
        q = conformal_quantile(score.score(*draw(n, g)), ALPHA)
        pred, y = draw(m, g)
        hits += score.predict_set(pred, q).contains(score.flatten(y)).double().mean().item()
    p, se = _beta_se(n, m, trials)
    assert abs(hits / trials - p) <= 3 * se, (hits / trials, p, se)


def test_marginal_intervals_are_not_simultaneous() -> None:
    """Negative control: per-component split intervals at level α cover all 4 components far less than 1-α."""
    g = torch.Generator().manual_seed(5)
    pred, y = _vectors(2000, g)
    q = conformal_quantile((y - pred).abs().T.contiguous(), ALPHA)  # one threshold per component, (4,)
    pt, yt = _vectors(20_000, g)
    joint = ((yt - pt).abs() <= q).all(-1).double().mean().item()
    assert joint < 1 - ALPHA - 0.1, joint  # ~0.77 here; SE of the estimate ~0.01


def test_tighter_than_bonferroni_and_ellipsoid_smaller_when_correlated() -> None:
    """ρ = 0.95 Gaussian residuals, d=4: sup-norm box < Bonferroni box, ellipsoid < box (log-volumes)."""
    g = torch.Generator().manual_seed(9)
    d, n = 4, 4000
    cov = torch.full((d, d), 0.95, dtype=torch.float64).fill_diagonal_(1.0)
    chol = torch.linalg.cholesky(cov)

    def draw(k: int) -> tuple[torch.Tensor, torch.Tensor]:
        pred = torch.zeros(k, d, dtype=torch.float64)
        return pred, torch.randn(k, d, generator=g, dtype=torch.float64) @ chol.T

    sup, maha = SupNorm().fit(*draw(n)), Mahalanobis().fit(*draw(n))
    one = torch.zeros(1, d, dtype=torch.float64)
    box = sup.predict_set(one, conformal_quantile(sup.score(*draw(n)), ALPHA)).size().item()
    ell = maha.predict_set(one, conformal_quantile(maha.score(*draw(n)), ALPHA)).size().item()
    pred, y = draw(n)
    bonf = conformal_quantile((y - pred).abs().T.contiguous(), ALPHA / d)  # per-component at α/d
    bonf_logvol = (2 * bonf).log().sum().item()
    # Here box 5.26, Bonferroni 6.00 (≈ 4 log(2·2.24), the |N(0,1)| quantile at 1 - α/4), ellipsoid 1.87.
    assert box < bonf_logvol - 0.3 and ell < box - 2.0, (box, bonf_logvol, ell)


def test_sets_invert_scores() -> None:
    """y ∈ set(pred, q) exactly when score(pred, y) <= q, for per-example thresholds and per-example sigma."""
    g = torch.Generator().manual_seed(2)
    pred, y = _vectors(500, g)
    q = torch.rand(500, generator=g, dtype=torch.float64) * 3
    sigma = 0.5 + torch.rand(500, 4, generator=g, dtype=torch.float64)
    sup = SupNorm(scale=torch.tensor([1.0, 2.0, 0.5, 1.0]))
    maha = Mahalanobis().fit(*_vectors(100, g))
    assert torch.equal(sup.predict_set(pred, q, sigma).contains(y), sup.score(pred, y, sigma) <= q)
    assert torch.equal(maha.predict_set(pred, q).contains(y), maha.score(pred, y) <= q)
    manual = ((y - pred).abs() / (sigma * sup.scale)).amax(-1)
    torch.testing.assert_close(sup.score(pred, y, sigma), manual)
    whitened = torch.linalg.solve_triangular(maha.chol, (y - pred).T, upper=False)
    torch.testing.assert_close(maha.score(pred, y), whitened.norm(dim=0))
    box = sup.predict_set(pred[:2], math.inf)
    assert isinstance(box, Box) and (box.size() == math.inf).all() and box.contains(y[:2] * 1e9).all()


def test_symmetric_targets_use_the_upper_triangle() -> None:
    """Changing only the strict lower triangle leaves scores unchanged; sets live on k(k+1)/2 entries."""
    g = torch.Generator().manual_seed(3)
    pred, y = _matrices(50, g)
    skew = y.clone()
    skew[:, 2, 0] += 100.0  # lower triangle only
    for score in (SupNorm(symmetric=True).fit(pred, y), Mahalanobis(symmetric=True).fit(pred, y)):
        assert torch.equal(score.score(pred, y), score.score(pred, skew))
        pset = score.predict_set(pred, 1.0)
        assert pset.contains(score.flatten(y)).shape == (50,)
    a = torch.arange(9.0).reshape(3, 3)
    assert upper_triangle(a).tolist() == [0.0, 1.0, 2.0, 4.0, 5.0, 8.0]
    with pytest.raises(ValueError, match=r"\(\.\.\., k, k\)"):
        SupNorm(symmetric=True).score(torch.zeros(4, 3), torch.zeros(4, 3))


def test_ellipsoid_by_hand() -> None:
    """Axis-aligned ellipse with semi-axes 2r, r: membership on and off the boundary, log-volume log(2πr²)."""
    chol = torch.diag(torch.tensor([2.0, 1.0], dtype=torch.float64))
    e = Ellipsoid(torch.zeros(3, 2, dtype=torch.float64), chol, torch.tensor([1.0, 0.0, math.inf], dtype=torch.float64))
    assert isinstance(e, PredictionSet)
    y = torch.tensor([[2.0, 0.0], [0.0, 0.0], [1e9, -1e9]], dtype=torch.float64)
    assert e.contains(y).tolist() == [True, True, True]
    assert e.contains(y + torch.tensor([0.0, 0.1], dtype=torch.float64)).tolist() == [False, False, True]
    size = e.size()
    assert size[0].item() == pytest.approx(math.log(2 * math.pi)) and size[1].item() == -math.inf
    assert size[2].item() == math.inf
    ball = Ellipsoid(torch.zeros(3, dtype=torch.float64), torch.eye(3, dtype=torch.float64), torch.tensor(2.0))
    assert ball.size().item() == pytest.approx(math.log(4 / 3 * math.pi * 8))
    bad = [
        (torch.zeros(2), torch.eye(3), torch.tensor(1.0), "chol"),
        (torch.zeros(2), -torch.eye(2), torch.tensor(1.0), "positive"),
        (torch.zeros(2), torch.eye(2), torch.tensor(-1.0), "radius"),
        (torch.zeros(4, 2), torch.eye(2), torch.ones(3), "broadcast"),
    ]
    for center, lo, r, match in bad:
        with pytest.raises(ValueError, match=match):
            Ellipsoid(center, lo, r)
    with pytest.raises(ValueError, match="shape"):
        e.contains(torch.zeros(2, 2))


def test_fit_with_fewer_residuals_than_dimensions_needs_the_ridge() -> None:
    """n_fit < d: the relative ridge keeps Σ̂ positive definite; without it fitting fails with a clear error."""
    pred, y = torch.zeros(2, 5, dtype=torch.float64), torch.randn(2, 5, generator=torch.Generator().manual_seed(0))
    maha = Mahalanobis(ridge=0.1).fit(pred, y.double())
    assert torch.isfinite(maha.chol).all()
    with pytest.raises(ValueError, match="positive definite"):
        Mahalanobis(ridge=0.0).fit(pred, y.double())
    with pytest.raises(ValueError, match="zero"):
        Mahalanobis().fit(pred, pred)
    with pytest.raises(RuntimeError, match="fit"):
        Mahalanobis().score(pred, pred)
    with pytest.raises(ValueError, match="ridge"):
        Mahalanobis(ridge=-1.0)
    with pytest.raises(ValueError, match="scale"):
        SupNorm(scale=torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="scale has 2"):
        SupNorm(scale=torch.ones(2)).score(pred, y.double())


@pytest.mark.parametrize("name", ["supnorm", "mahalanobis"])
def test_round_trips(name: str) -> None:
    """to_dict -> JSON -> from_dict and state_dict reproduce scores exactly; registry dispatches by name."""
    g = torch.Generator().manual_seed(4)
    score = VECTOR_SCORES[name]().fit(*_vectors(60, g))
    pred, y = _vectors(30, g)
    d = json.loads(json.dumps(score.to_dict()))
    fresh = VECTOR_SCORES[name]()
    fresh.load_state_dict(score.state_dict())
    for copy in (type(score).from_dict(d), vector_score_from_dict(d), fresh):
        assert torch.equal(copy.score(pred, y), score.score(pred, y))
    assert set(VECTOR_SCORES) == {"supnorm", "mahalanobis"} and d["score"] == name


@pytest.mark.parametrize(
    ("patch", "match"),
    [
        ({"cov": [[1.0, 2.0], [2.0, 1.0]]}, "positive definite"),
        ({"cov": [[1.0, 0.5], [0.0, 1.0]]}, "symmetric"),
        ({"cov": [[1.0, math.nan], [math.nan, 1.0]]}, "finite"),
        ({"cov": []}, "rows"),
        ({"ridge": -0.1}, "ridge"),
        ({"symmetric": 1}, "symmetric"),
        ({"score": "supnorm"}, "score"),
        ({"extra": 1}, "keys"),
    ],
)
def test_malformed_dicts(patch: dict, match: str) -> None:
    """Each malformed field raises ValueError naming it; non-SPD state_dicts are refused."""
    d = {"score": "mahalanobis", "symmetric": False, "ridge": 0.0, "cov": [[1.0, 0.0], [0.0, 1.0]]}
    with pytest.raises(ValueError, match=match):
        Mahalanobis.from_dict(d | patch)
    with pytest.raises(ValueError, match="unknown vector score"):
        vector_score_from_dict({"score": "ball"})
    with pytest.raises(ValueError, match="scale"):
        SupNorm.from_dict({"score": "supnorm", "symmetric": False, "scale": [1.0, math.inf]})
    with pytest.raises(RuntimeError, match="positive definite"):
        Mahalanobis().load_state_dict({"cov": torch.tensor([[1.0, 2.0], [2.0, 1.0]])})
    with pytest.raises(RuntimeError, match="scale"):
        SupNorm().load_state_dict({"scale": torch.tensor([-1.0])})
