"""``benchmarks/perturbation_scale.py`` end to end on a tiny grid: measured, written as it goes, resumable, honest."""

from __future__ import annotations

import json

import pytest

TINY = ["--singles", "6", "--doubles", "8", "--predict-conditions", "6", "--predict-timed", "2",
        "--predict-cells", "20", "--train-steps", "2"]


@pytest.fixture(scope="module")
def bench(load_benchmark):
    pytest.importorskip("anndata")
    pytest.importorskip("h5py")
    return load_benchmark("perturbation_scale")


def test_a_tiny_grid_is_measured_resumed_and_never_filled_in(bench, tmp_path):
    out, work = tmp_path / "scale.json", tmp_path / "work"
    common = [*TINY, "--work", str(work), "--output", str(out)]
    assert bench.main(["--genes", "50", "--cells", "500", "--caveat", "test machine", *common]) == 0
    data = json.loads(out.read_text())
    cell = data["grid"]["50x500"]
    assert cell["status"] == "measured" and data["caveat"] == "test machine"
    assert cell["fit"]["setup"]["wall_s"] > 0 and cell["fit"]["train"]["epoch_s_extrapolated"] > 0
    assert "extrapolated" in cell["fit"]["train"]["how"]
    pred = cell["predict"]
    assert pred["conditions"] == 6 and pred["conditions_timed"] == 2 and "extrapolated" in pred["how"]
    assert pred["generate_s"] == pytest.approx(3 * pred["generate_timed_s"], abs=0.02)
    assert cell["predict"]["negative_values"] == 0
    assert 0 < cell["fit"]["peak_rss_gib"] < 8 and 0 < cell["predict"]["peak_rss_gib"] < 8
    assert data["table"]["50x500"]["predict_s"] == cell["predict"]["total_s"]

    # rerun on a larger grid: the measured cell is kept as it was, a child past its time limit is stopped and
    # recorded, and what is larger in genes and cells is not started; nothing unmeasured gets a number
    assert bench.main(["--genes", "50", "70", "--cells", "500", "400", "--max-seconds", "0.01", *common]) == 0
    again = json.loads(out.read_text())
    assert again["grid"]["50x500"] == cell and again["caveat"] == "test machine"
    assert again["grid"]["50x400"]["status"].startswith("simulate: timed out")
    assert again["grid"]["70x400"] == {"genes": 70, "cells": 400, "status": "not run"}
    assert again["grid"]["70x500"] == {"genes": 70, "cells": 500, "status": "not run"}
    assert set(again["table"]) == {"50x500"}
    assert len(again["commands"]) == 2  # both runs that wrote the file
