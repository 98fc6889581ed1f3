"""``benchmarks/_results.py``: a results file is written only by a complete run, and merging keeps other cases."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="module")
def results(load_benchmark):
    return load_benchmark("_results")


def test_interrupted_run_leaves_the_file_as_it_was(results, tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"a": 1, "b": 2}))
    with pytest.raises(KeyboardInterrupt), results.results_file(path) as cases:
        cases["a"] = 10
        raise KeyboardInterrupt
    assert json.loads(path.read_text()) == {"a": 1, "b": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]  # no temporary file left


def test_complete_run_replaces_or_merges(results, tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"a": 1, "b": 2, "shared": {"x": 1}}))
    with results.results_file(path, header={"threads": 1}, merge=True) as cases:
        cases["a"] = 10
    assert json.loads(path.read_text()) == {"a": 10, "b": 2, "shared": {"x": 1}, "threads": 1}
    with results.results_file(path, section="shared") as cases:
        cases["y"] = 2
    assert json.loads(path.read_text())["shared"] == {"x": 1, "y": 2}
    with results.results_file(path) as cases:
        cases["only"] = True
    assert json.loads(path.read_text()) == {"only": True}


def test_merge_refuses_a_file_that_is_not_an_object(results, tmp_path):
    path = tmp_path / "bench.json"
    path.write_text("[1, 2]")
    with pytest.raises(SystemExit, match="does not hold a JSON object"):
        results.merge_results(path, {"a": 1})
    assert path.read_text() == "[1, 2]"


def test_crystal_mp_tables_follow_the_results(load_benchmark):
    tables = load_benchmark("crystal_mp_tables")
    results = json.loads(tables.RESULTS.read_text())
    text = tables.markdown(results)
    ours = results["formation_energy_per_atom"]["models"]["prdnet (ours)"]["mae"]
    assert f"| prdnet (ours) | {ours:.4f} |" in text
    assert "(published, not our run)" in text  # anchors are labelled, never shown as our runs
    rows = sum(g.startswith("crystal_system=") for t in ("formation_energy_per_atom", "band_gap")
               for g in results[t]["coverage"]["groups"])
    assert text.count("| crystal_system=") == rows  # one row per group of each target


def test_crystal_mp_group_coverage_gives_each_group_its_resolution(load_benchmark, monkeypatch):
    """Each group's p_outside is the miss probability at its own calibration and test sizes."""
    from sciml.uq import coverage_miss_probability

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))  # its sibling modules
    bench = load_benchmark("crystal_mp")
    test = {"n_elements": np.array([2] * 250 + [3] * 300)}
    calib = {"n_elements": np.array([2] * 400 + [3] * 100)}
    covered = np.arange(550) % 10 != 0  # 0.9 in both groups
    groups = bench.group_coverage(covered, test, calib)
    assert groups["n_elements=2"] == {"n": 250, "coverage": 0.9, "judged": True, "n_calib": 400,
                                      "p_outside": coverage_miss_probability(400, 250, 0.1, bench.TOL)}
    assert groups["n_elements=3"]["p_outside"] > groups["n_elements=2"]["p_outside"]  # fewer calibration points
    assert "n_calib" not in bench.group_coverage(covered, test)["n_elements=2"]


def test_crystal_mp_ensemble_curve_is_the_mean_of_the_first_k(load_benchmark, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))  # its sibling modules
    bench = load_benchmark("crystal_mp_ensemble")
    y = np.array([0.0, 1.0, 2.0])
    members = np.array([[0.2, 1.2, 2.2], [-0.2, 0.8, 2.4], [1.0, 1.0, 1.0]])  # errors cancel on two points
    curve = bench.size_curve({"val": {"y": y, "mean": members}, "test": {"y": y, "mean": members[::-1]}})
    assert [row["k"] for row in curve] == [1, 2, 3]
    np.testing.assert_allclose([row["val_mae"] for row in curve], [0.2, 0.3 / 3, (1 / 3 + 0 + 0.4 / 3) / 3])
    np.testing.assert_allclose(curve[0]["test_mae"], 2 / 3)


def test_crystal_mp_keeps_an_earlier_cgcnn_row_only_on_the_same_split(load_benchmark, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    bench = load_benchmark("crystal_mp")
    now = {"n_test": 3, "split_sizes": {"train": 7, "test": 3}}
    row = {"mae": 0.04, "structures_per_s": 200.0}
    earlier = now | {"models": {"cgcnn": row}}
    assert bench.earlier_cgcnn(earlier, now) == {bench.EARLIER_CGCNN: row}
    assert bench.earlier_cgcnn({**now, "models": {bench.EARLIER_CGCNN: row}}, now) == {bench.EARLIER_CGCNN: row}
    assert bench.earlier_cgcnn(earlier | {"split_sizes": {"train": 8, "test": 3}}, now) == {}
    assert bench.earlier_cgcnn(None, now) == {}
