"""The data engine's cheap SCF settings: allowed only as measured by ``benchmarks/hamiltonian_cheap_settings.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sciml.hamiltonian.data import cheap
from sciml.hamiltonian.data.generate import SCFSettings

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "hamiltonian_cheap_settings.json"


def test_measured_table_is_the_benchmark_results():
    data = json.loads(RESULTS.read_text())
    table = {(m.density_fit, m.grid_level, m.final_build): m for m in cheap.MEASURED[data["xc"], data["basis"]]}
    cases = {k: v for k, v in data["summary"].items() if k != "reference"}
    assert len(table) == len(cases) and data["limit_uha"] == cheap.LIMIT_UHA
    for v in cases.values():
        m = table[v.get("density_fit", False), v.get("grid_level", 3), v.get("final_build", False)]
        assert m.h_mae_uha == pytest.approx(v["h_mae_uha_worst"], abs=0.01)
        assert m.h_max_abs_uha == pytest.approx(v["h_max_abs_uha_worst"], abs=0.1)
        assert m.occupied_max_uha == pytest.approx(v["occupied_max_uha_worst"], abs=0.1)
        assert m.time_ratio == pytest.approx(v["time_ratio"], abs=0.01) and m.passes == v["passes"]


def test_check_cheap_allows_the_reference_and_passing_settings_only(monkeypatch):
    assert cheap.check_cheap(SCFSettings()) is None
    assert cheap.check_cheap(SCFSettings(grid_level=4, final_build=True)) is None  # finer than the reference
    with pytest.raises(ValueError, match="'--grid-level 0' at pbe/def2-svp has no measured H error"):
        cheap.check_cheap(SCFSettings(grid_level=0))
    with pytest.raises(ValueError, match="at hf/def2-svp has no measured"):
        cheap.check_cheap(SCFSettings(xc="hf", density_fit=True))
    bad = cheap.CheapMeasurement(True, 2, False, 12.5, 300.0, 200.0, 0.8)
    good = cheap.CheapMeasurement(False, 2, False, 0.1, 7.0, 2.0, 0.7)
    monkeypatch.setitem(cheap.MEASURED, ("pbe", "def2-svp"), (bad, good))
    assert cheap.check_cheap(SCFSettings(grid_level=2)) is good
    with pytest.raises(ValueError, match=r"'--density-fit --grid-level 2' moves H by 12.5 µHa .* more than 10 µHa; "
                                         r"cheap settings allowed: '--grid-level 2'"):
        cheap.check_cheap(SCFSettings(density_fit=True, grid_level=2))
