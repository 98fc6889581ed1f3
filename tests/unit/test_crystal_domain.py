"""Crystal applicability domain: embedding invariance, domain.json round trip, size bins, shift-aware guard."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from pymatgen.core import Lattice, Structure
from torch_geometric.data import Batch

from sciml.crystal.calibration import cell_size_edges, ensure_group_function, resolve_group_by
from sciml.crystal.data.graphs import GraphSettings, structure_to_graph
from sciml.crystal.domain import CrystalDomain
from sciml.crystal.module import CrystalRegressor
from sciml.crystal.shift import shift_thresholds
from sciml.testing.fixtures import perovskite
from sciml.uq import MondrianConformal, SplitConformal
from sciml.uq.domain import DomainScore
from sciml.uq.groups import GROUP_FUNCTIONS, structure_groups

GRAPH = GraphSettings.from_dict({"cutoff": 6.0, "max_neighbors": 12, "g_max": 3.0})



def regressor() -> CrystalRegressor:
    torch.manual_seed(0)
    target = {"name": "e", "unit": "eV/cell", "extensive": True, "mean": 0.0, "std": 1.0}
    net = {"name": "prdnet", "dim": 16, "n_layers": 2, "n_rbf": 16, "n_bins": 8, "ffn": True, "edge_update": True}
    return CrystalRegressor(net, GRAPH.to_dict(), target, ["Ba", "Ca", "O", "Sr", "Ti", "Zr"]).eval()


def embed(module, structures, layer="pooled") -> torch.Tensor:
    batch = Batch.from_data_list([structure_to_graph(s, GRAPH, "x", dtype=torch.float64) for s in structures])
    with torch.no_grad():
        return module.embed(batch, layer).double()


def random_perovskites(n: int, seed: int) -> list[Structure]:
    rng = np.random.default_rng(seed)
    return [perovskite(str(rng.choice(["Sr", "Ba", "Ca"])), str(rng.choice(["Ti", "Zr"])),
                       lattice=float(rng.uniform(3.8, 4.2)), jitter=0.05, rng=rng) for _ in range(n)]


@pytest.mark.parametrize("layer,width", [("pooled", 32), ("hidden", 16)])
def test_embedding_shape_and_invariance_give_the_same_pvalue(float64, layer, width):
    module = regressor()
    s = random_perovskites(1, 3)[0]
    rot = torch.linalg.qr(torch.randn(3, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64))[0]
    rotated = Structure(Lattice(s.lattice.matrix @ rot.numpy().T), s.species, s.cart_coords @ rot.numpy().T,
                        coords_are_cartesian=True)
    order = [3, 0, 4, 2, 1]
    permuted = Structure(s.lattice, [s.species[i] for i in order], [s.frac_coords[i] for i in order])
    emb = embed(module, [s, rotated, permuted], layer)
    assert emb.shape == (3, width)
    torch.testing.assert_close(emb[1], emb[0], rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(emb[2], emb[0], rtol=1e-9, atol=1e-9)
    score = DomainScore(k=3).fit(embed(module, random_perovskites(30, 0), layer),
                                 embed(module, random_perovskites(40, 1), layer))
    p = score.pvalue(emb)
    assert p[0] == p[1] == p[2] and 0 < p[0] <= 1


def test_unknown_embedding_layer_is_an_error():
    with pytest.raises(ValueError, match="unknown embedding layer"):
        regressor().embed(Batch.from_data_list([structure_to_graph(random_perovskites(1, 0)[0], GRAPH, "x")]), "x")


def fitted_domain(groups: bool = False) -> CrystalDomain:
    gen = torch.Generator().manual_seed(0)
    score = DomainScore(k=5, max_reference=50).fit(torch.randn(80, 4, generator=gen), torch.randn(60, 4, generator=gen))
    emb = torch.randn(200, 4, generator=gen, dtype=torch.float64)
    scores = torch.rand(200, generator=gen, dtype=torch.float64)
    labels = torch.arange(200) % 2 if groups else None
    return CrystalDomain.from_dict(CrystalDomain("pooled", score, emb, scores, labels, 0, (5, 5), "0" * 64).to_dict())


def test_domain_json_round_trip_is_exact_and_validated():
    domain = fitted_domain(groups=True)
    text = json.dumps(domain.to_dict())
    again = CrystalDomain.from_dict(json.loads(text))
    assert json.dumps(again.to_dict()) == text  # float32-rounded state reads back to itself
    query = torch.randn(7, 4, dtype=torch.float64)
    assert torch.equal(again.pvalue(query), domain.pvalue(query))
    assert again.train_sizes == (5, 5) and again.size_known(5) and not again.size_known(6)
    bad = json.loads(text)
    for key, value, match in [("layer", "last", "layer"), ("train_sizes", [6, 5], "train_sizes"),
                              ("format_version", 2, "format_version")]:
        with pytest.raises(ValueError, match=match):
            CrystalDomain.from_dict(bad | {key: value})
    with pytest.raises(ValueError, match="shift"):
        CrystalDomain.from_dict(bad | {"shift": bad["shift"] | {"scores": bad["shift"]["scores"][:-1]}})
    with pytest.raises(ValueError, match="finite"):
        CrystalDomain.from_dict(bad | {"shift": bad["shift"] | {"scores": [math.nan] * 200}})


class Cell:
    """A stand-in structure: only its length (atoms) matters to the size groups."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def test_cell_size_bins_come_from_calibration_counts():
    assert cell_size_edges([6] * 67 + [8] * 57 + [10] * 30 + [12] * 22 + [14] * 10 + [16] * 8 + [18] * 5) == \
        [6, 8, 10, 12, 14]
    assert cell_size_edges([5] * 300) == [5]
    assert cell_size_edges([6] * 5 + [8] * 5) == [6]  # fewer than min_count in total: one bin
    assert cell_size_edges([6] * 30 + [8] * 5) == [6]  # a short last bin joins the previous one
    cfg = resolve_group_by({"method": "mondrian", "group_by": "cell_size"}, [Cell(n) for n in [6] * 30 + [9] * 30])
    assert cfg["group_by"] == "cell_size:6,9"
    labels = structure_groups(cfg["group_by"], [Cell(4), Cell(6), Cell(8), Cell(9), Cell(40)])
    assert labels.tolist() == [0, 0, 0, 1, 1]
    assert resolve_group_by({"method": "split"}, []) == {"method": "split"}
    with pytest.raises(ValueError, match="increasing"):
        ensure_group_function("cell_size:9,6")
    ensure_group_function("crystal_system")  # other names: no-op
    assert "cell_size:9,6" not in GROUP_FUNCTIONS


def test_size_binned_mondrian_covers_every_size_group_where_one_threshold_does_not():
    """Errors grow with cell size (σ = n/6): one split threshold over-covers small and under-covers large cells."""
    rng = np.random.default_rng(0)
    sizes = np.array([6, 8, 10, 12, 16, 20, 24])
    weights = np.array([0.33, 0.28, 0.15, 0.11, 0.06, 0.04, 0.03])
    eval_groups = {"6-8": (6, 8), "9-12": (9, 12), "13-24": (13, 24)}
    cover = {"split": {g: [] for g in eval_groups}, "mondrian": {g: [] for g in eval_groups}}
    for _ in range(200):
        n_cal, n_test = rng.choice(sizes, 400, p=weights), rng.choice(sizes, 2000, p=weights)
        r_cal, r_test = rng.normal(size=400) * n_cal / 6, rng.normal(size=2000) * n_test / 6
        zeros = np.zeros(400)
        cfg = resolve_group_by({"method": "mondrian", "group_by": "cell_size"}, [Cell(n) for n in n_cal])
        mondrian = MondrianConformal(score="absolute", alpha=0.1, group_by=cfg["group_by"])
        g_cal = structure_groups(cfg["group_by"], [Cell(n) for n in n_cal])
        mondrian.fit_predictions(torch.tensor(zeros), torch.tensor(r_cal), g_cal)
        g_test = structure_groups(cfg["group_by"], [Cell(n) for n in n_test])
        q_m = mondrian.threshold_or_inf(g_test, 0.1).numpy()
        q_s = float(SplitConformal(score="absolute", alpha=0.1).fit_predictions(
            torch.tensor(zeros), torch.tensor(r_cal)).threshold(0.1))
        for name, (lo, hi) in eval_groups.items():
            rows = (n_test >= lo) & (n_test <= hi)
            cover["mondrian"][name].append(np.mean(np.abs(r_test[rows]) <= q_m[rows]))
            cover["split"][name].append(np.mean(np.abs(r_test[rows]) <= q_s))
    # 200 draws: the mean coverage has standard error < 0.005; Mondrian per bin is in [0.9, 0.9 + 1/(n_bin+1)]
    for name in eval_groups:
        assert 0.89 <= np.mean(cover["mondrian"][name]) <= 0.95, (name, np.mean(cover["mondrian"][name]))
    assert np.mean(cover["split"]["6-8"]) > 0.95 and np.mean(cover["split"]["13-24"]) < 0.8


def test_shift_aware_guard_gives_infinite_intervals_on_an_extreme_shift():
    domain = fitted_domain()
    gen = torch.Generator().manual_seed(1)
    far = torch.randn(40, 4, generator=gen, dtype=torch.float64) + 8.0
    result = shift_thresholds(domain, far, None, alpha=0.1)
    assert torch.isinf(result.thresholds).all()  # the test point's own weight exceeds α of the total mass
    mild = torch.randn(40, 4, generator=gen, dtype=torch.float64) * 0.3 + 1.5
    result = shift_thresholds(domain, mild, None, alpha=0.1)  # overlapping, but few calibration points carry weight
    assert result.guarded == [0] and result.ess[0] < 50 and torch.isinf(result.thresholds).all()
    near = torch.randn(40, 4, generator=gen, dtype=torch.float64)
    result = shift_thresholds(domain, near, None, alpha=0.1)
    plain = float(SplitConformal(score="absolute", alpha=0.1).fit(domain.shift_scores).threshold(0.1))
    assert not result.guarded and torch.isfinite(result.thresholds).all()
    assert (result.thresholds - plain).abs().max() < 0.15  # scores are U(0, 1): weights near 1 on exchangeable data
    with pytest.raises(ValueError, match="at least 5"):
        shift_thresholds(domain, near[:3], None, alpha=0.1)


def test_shift_aware_takes_the_weighted_quantile_within_groups():
    domain = fitted_domain(groups=True)
    domain.shift_scores[domain.shift_groups == 1] += 10.0  # group 1 has much larger scores
    batch = torch.randn(30, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    groups = torch.arange(30) % 3  # group 2 was never calibrated: no bound
    result = shift_thresholds(domain, batch, groups, alpha=0.1)
    q = result.thresholds
    assert (q[groups == 0] < 1.01).all() and (q[groups == 1] > 10).all() and torch.isinf(q[groups == 2]).all()
    assert set(result.ess) == {0, 1} and not result.guarded
