"""``benchmarks/hamiltonian_qm9.py --quick`` on twelve tiny molecules (sto-3g): three methods, both splits, the
learning curve and its power-law fits, finite numbers, exact split sizes and the tables beside the JSON."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("pyscf")

from sciml.cli.main import main as sciml_main

MOLECULES = "H2O,NH3,CH4,HCN,CO,C2H2,H2CO,CH3OH,C2H4,CH3CN,HCOOH,C2H6"  # 2-8 atoms; C2H6 alone has 8


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("qm9-bench") / "set"
    assert sciml_main(["data", "hamiltonian", "--molecule", MOLECULES, "--n", "1", "--h0", "fast", "--out", str(out),
                       "--basis", "sto-3g", "--xc", "pbe", "--conv-tol", "1e-9", "--no-progress"]) == 0
    return out


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """Two molecules with more heavy atoms (3, 4) than any of ``folder``'s (at most 2)."""
    out = tmp_path_factory.mktemp("qm9-bench") / "large"
    assert sciml_main(["data", "hamiltonian", "--molecule", "C3H8,CH3COOH", "--n", "1", "--h0", "fast", "--out",
                       str(out), "--basis", "sto-3g", "--xc", "pbe", "--conv-tol", "1e-9", "--no-progress"]) == 0
    return out


def finite_numbers(tree) -> list[float]:
    """Every number in a JSON tree (booleans and None left out)."""
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in finite_numbers(v)]
    if isinstance(tree, list):
        return [x for v in tree for x in finite_numbers(v)]
    return [float(tree)] if isinstance(tree, int | float) and not isinstance(tree, bool) else []


def test_quick_run_measures_three_methods_on_both_splits_and_the_curve(folder, tmp_path, load_benchmark):
    bench = load_benchmark("hamiltonian_qm9")
    output = tmp_path / "out" / "hamiltonian_qm9.json"
    argv = ["--quick", "--data", str(folder), "--n-test", "3", "--train-sizes", "2", "3", "9", "--work",
            str(tmp_path / "work"), "--output", str(output)]
    assert bench.main(argv) == 0
    result = json.loads(output.read_text())
    assert result["command"].endswith(" ".join(argv)) and result["n_molecules"] == 12
    assert all(math.isfinite(x) for x in finite_numbers(result))

    rand, size = result["random"], result["size"]
    assert rand["split_sizes"] == {"train": 4, "val": 2, "calib": 3, "test": 3}  # the pool: 12 - 3 - 2 - 3
    assert size["cut_atoms"] == 8 and size["split_sizes"] == {"train": 4, "val": 2, "calib": 3, "test": 1}
    assert size["n_atoms_test"] == [8, 8] and size["n_atoms_train"][1] < 8  # test larger than any training molecule
    test_molecules = {r["molecule"] for r in rand["per_molecule"]}
    assert len(test_molecules) == 3
    split = json.loads((tmp_path / "work" / "random" / "run" / "split.json").read_text())
    trained = {i.split(":")[0].split("-", 1)[1].removesuffix(".npz") for i in split["train"]}
    intended = bench.random_molecule_split(bench.snapshot(folder), 3, 2, 3, seed=0)
    assert trained == {p.stem for p in intended.train} and trained.isdisjoint(test_molecules)  # the data module's split
    assert test_molecules == {p.stem for p in intended.test}
    for r in (rand, size):
        assert set(r) >= {"h0", "ridge", "network", "exported"}
        assert r["ridge"]["h_mae_microhartree"] < r["h0"]["h_mae_microhartree"]  # the ridge learns from H0
        assert 0.0 <= r["exported"]["coverage"] <= 1.0
        assert (r["network"]["coverage"] is None) == (not r["exported"]["network_used"])

    curve = result["learning_curve"]
    assert [p["n_train"] for p in curve["points"]] == [2, 3, 4]  # 9 is above the pool of 4
    assert curve["points"][-1]["ridge"] == rand["ridge"]  # the largest point is the random split's model
    assert all(p["split_sizes"]["test"] == 3 for p in curve["points"])
    for method in ("h0", "ridge", "network"):
        fit = curve["power_law"][method]["h_mae_microhartree"]
        assert fit["extrapolated_n"] == 40 and fit["extrapolated_error"] > 0
    h0 = [p["h0"]["h_mae_microhartree"] for p in curve["points"]]
    np.testing.assert_allclose(h0, h0[0])  # one fixed test set: H0's error does not move
    assert abs(curve["power_law"]["h0"]["h_mae_microhartree"]["b"]) < 1e-9

    table = output.with_suffix(".md").read_text()
    assert "| random | 4 / 2 / 3 / 3 |" in table and "size (test ≥ 8 atoms)" in table and "(extrapolation)" in table


def test_splits_and_power_law(tmp_path, load_benchmark):
    bench = load_benchmark("hamiltonian_qm9")
    counts = np.array([3, 4, 4, 5, 5, 5, 6, 9, 9, 12])
    assert bench.size_cut(counts, 0.3) == 9 and bench.size_cut(counts, 0.1) == 12 and bench.size_cut(counts, 0.0) == 12
    assert bench.train_sizes([25, 50, 100, 200], 190) == [25, 50, 100, 190]
    fit = bench.power_law([10, 20, 40], [8.0, 4.0, 2.0])
    assert fit["b"] == pytest.approx(1.0) and fit["extrapolated_error"] == pytest.approx(0.2)
    files = [tmp_path / f"m{i}.npz" for i in range(10)]
    for f in files:
        f.write_bytes(b"")
    split = bench.random_molecule_split(files, 2, 1, 2, seed=4)
    assert split.sizes() == {"train": 5, "val": 1, "calib": 2, "test": 2}
    assert sorted(sum(split.parts().values(), [])) == sorted(files)
    fractions = bench.link_folder(tmp_path / "linked", split, seed=4)
    assert fractions == [0.5, 0.1, 0.2, 0.2] and len(list((tmp_path / "linked").glob("*.npz"))) == 10


def test_size_data_tests_the_random_model_on_larger_molecules(folder, large, tmp_path, load_benchmark):
    bench = load_benchmark("hamiltonian_qm9")
    output = tmp_path / "out.json"
    argv = ["--quick", "--data", str(folder), "--n-test", "3", "--train-sizes", "9", "--size-data", str(large),
            "--work", str(tmp_path / "work"), "--output", str(output)]
    assert bench.main(argv) == 0
    result = json.loads(output.read_text())
    rand, size = result["random"], result["size"]
    assert size["size_data"] == str(large) and "cut_atoms" not in size
    assert size["split_sizes"] == {**rand["split_sizes"], "test": 2}
    assert size["train_seconds"] == rand["train_seconds"]  # the same model, not trained again
    assert size["n_heavy_atoms_test"] == [3, 4] and size["n_heavy_atoms_train"][1] <= 3
    assert {r["molecule"] for r in size["per_molecule"]} == {"C3H8", "CH3COOH"}
    assert not (tmp_path / "work" / "size").exists()
    assert "size (`large`, 3–4 heavy atoms; trained ≤ " in output.with_suffix(".md").read_text()


def test_extra_training_molecules_min_steps_and_resume(folder, large, tmp_path, load_benchmark, capsys):
    bench = load_benchmark("hamiltonian_qm9")
    output, work = tmp_path / "out.json", tmp_path / "work"
    argv = ["--quick", "--data", str(folder), "--n-test", "3", "--train-sizes", "4", "--size-cut", "8",
            "--extra-train", str(large), "--min-steps", "3", "--work", str(work), "--output", str(output)]
    assert bench.main(argv) == 0
    first = json.loads(output.read_text())
    rand = first["random"]
    assert rand["split_sizes"]["train"] == 4 and rand["extra_train_files"] == 2
    split = json.loads((work / "random" / "run" / "split.json").read_text())
    trained = {i.split(":")[0].split("-", 1)[1].removesuffix(".npz") for i in split["train"]}
    assert {"C3H8", "CH3COOH"} <= trained and len(trained) == 6  # the extra molecules train every run
    assert rand["epochs"] == 2 and rand["optimizer_steps"] == 4  # 6 molecules, batch 4: 2 steps per epoch, >= 3 steps
    assert "| random | 4 + 2 extra / 2 / 3 / 3 |" in output.with_suffix(".md").read_text()

    capsys.readouterr()
    assert bench.main(argv) == 0  # run again: every finished run is reused, not trained again
    assert capsys.readouterr().out.count("reusing the finished run") == 2  # random and size
    again = json.loads(output.read_text())
    assert again["random"] == rand and again["size"] == first["size"]

    (work / "random" / "done.json").unlink()  # killed after training, before its export was recorded
    assert bench.main(argv) == 0
    resumed = json.loads(output.read_text())["random"]
    assert resumed["resumed"] and resumed["epochs"] == 2
    assert resumed["network"] == rand["network"] and resumed["ridge"] == rand["ridge"]  # the same trained model

    assert bench.main([*argv[:-4], "--min-steps", "0", "--work", str(work), "--output", str(output)]) == 0
    assert json.loads(output.read_text())["random"]["epochs"] == 1  # other settings: the run is made again
