"""benchmarks/crystal_train_step.py on generated perovskites: both block variants run and compute the same loss."""

from __future__ import annotations

import json

import yaml

from sciml.testing.fixtures import write_perovskite_csv

from .conftest import tiny_config


def test_train_step_benchmark_writes_both_variants(tmp_path, load_benchmark, monkeypatch):
    from ..conftest import BENCHMARKS

    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports `_results` beside it
    bench = load_benchmark("crystal_train_step")
    config = tiny_config(tmp_path, write_perovskite_csv(tmp_path / "toy.csv", n=40, seed=0))
    cfg = yaml.safe_load(config.read_text())
    cfg["model"]["network"] |= {"n_layers": 2}  # the first block with its edge update, the last without
    config.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "step.json"
    assert bench.main(["--config", str(config), "--steps", "2", "--threads", "1", "--output", str(out)]) == 0
    result = json.loads(out.read_text())["threads"]["1"]
    assert set(result["median_seconds"]) == {"gathered", "explicit"}
    assert all(len(t["cpu"]) == 2 for t in result["step_seconds"].values())
    assert abs(result["loss"]["gathered"] - result["loss"]["explicit"]) <= 1e-5 * abs(result["loss"]["explicit"])
