"""``benchmarks/perturbation.py`` writes its results only when a run is complete, merged by case, never partially."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def bench(load_benchmark):
    pytest.importorskip("anndata")
    return load_benchmark("perturbation")


def fake_case(setting: str, seed: int, mse: float) -> dict:
    """A case result with the fields the summary reads."""
    return {"case": f"grn/{setting}", "setting": setting, "seed": seed, "negative_share": 0.0,
            "additive_fallback": False, "per_double": {"worst_ratio": 1.0},
            "bands": {"coverage_simultaneous_resplit": 0.9},
            "summary": {"flow": {"all": {"mse": mse}}, "additive": {"all": {"mse": 2 * mse}}}}


def run(bench, monkeypatch, tmp_path, seeds, interrupt_at=None, extra=()):
    """``main`` over the default setting with ``grn_case`` replaced by a fake (raising Ctrl-C at ``interrupt_at``)."""
    def case(setting, seed, *args):
        if seed == interrupt_at:
            raise KeyboardInterrupt
        return fake_case(setting, seed, 0.1 + seed)

    monkeypatch.setattr(bench, "grn_case", case)
    monkeypatch.setattr(bench, "print_case", lambda r: None)
    monkeypatch.setattr(bench, "cell_eval_available", lambda: True)  # the notes must not depend on what is installed
    return bench.main(["--settings", "default", "--seeds", *map(str, seeds), "--no-real", "--work",
                       str(tmp_path / "work"), "--output", str(tmp_path / "out.json"), *extra])


def test_an_interrupted_run_leaves_the_results_file_as_it_was(bench, monkeypatch, tmp_path):
    out = tmp_path / "out.json"
    out.write_text(json.dumps({"grn": [fake_case("noisy", 0, 0.5)], "real": [], "notes": ["kept"]}))
    before = out.read_bytes()
    with pytest.raises(KeyboardInterrupt):
        run(bench, monkeypatch, tmp_path, [0, 1, 2], interrupt_at=1)
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "work"]  # no partial or temporary file


def test_a_complete_run_replaces_its_cases_and_keeps_the_others(bench, monkeypatch, tmp_path):
    out = tmp_path / "out.json"
    old = [fake_case("default", 0, 9.0), fake_case("noisy", 0, 0.5)]
    norman = {"case": "norman_additive", "seed": 0, "val_check": {}, "additive_fallback": False,
              "summary": {"flow": {"all": {"mse": 1.0}}, "additive": {"all": {"mse": 1.0}}}}
    out.write_text(json.dumps({"grn": old, "real": [norman], "notes": ["kept"]}))
    assert run(bench, monkeypatch, tmp_path, [0, 1]) == 0
    data = json.loads(out.read_text())
    cases = {(r["setting"], r["seed"]): r["summary"]["flow"]["all"]["mse"] for r in data["grn"]}
    assert cases == {("default", 0): 0.1, ("noisy", 0): 0.5, ("default", 1): 1.1}
    assert [r["case"] for r in data["real"]] == ["norman_additive"] and data["notes"] == ["kept"]
    assert len(data["done_when"]["grn"]) == 3  # the summary covers every case of the file
    assert run(bench, monkeypatch, tmp_path, [2], extra=["--fresh"]) == 0
    assert [(r["setting"], r["seed"]) for r in json.loads(out.read_text())["grn"]] == [("default", 2)]
