"""``sciml perturbation predict`` reports the applicability domain of each condition (shipped grn-default model)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from sciml.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
ad = pytest.importorskip("anndata")
EXAMPLE_CONTROL = ROOT / "examples" / "cells" / "grn_control.h5ad"


def cooperative_controls(path: Path) -> Path:
    """120 control cells of ``configs/data/grn_cooperative.yaml`` (another simulator setting), as an h5ad."""
    from sciml.perturbation.data.anndata_io import write_h5ad
    from sciml.perturbation.sim.simulate import simulate

    cfg = yaml.safe_load((ROOT / "configs" / "data" / "grn_cooperative.yaml").read_text())["grn"]
    a = simulate(cfg | {"n_singles": 4, "n_doubles": 2, "cells_per_condition": 5, "control_cells": 120})
    return write_h5ad(a[a.obs["condition"] == "ctrl"].copy(), path)


def test_predict_reports_domain_per_condition(tmp_path, capsys):
    pred = tmp_path / "pred.h5ad"
    assert main(["perturbation", "predict", "--control", str(EXAMPLE_CONTROL), "--perturbations",
                 "G001+G002,G001+G040", "--n-cells", "8", "--output", str(pred)]) == 0
    eff = ad.read_h5ad(pred).uns["perturbation_effects"]
    assert {"domain_pvalue", "in_domain", "domain_beta"} <= set(eff)
    assert eff["in_domain"].tolist() == [True, False]  # G040 was never perturbed in training: a rule
    assert eff["domain_pvalue"][0] > eff["domain_beta"] == 0.05
    assert np.isnan(eff["domain_pvalue"][1])  # an extrapolation has no p-value; its note says why
    assert "out of domain (never perturbed in training: G040" in eff["notes"][1] and not eff["notes"][0]
    captured = capsys.readouterr()
    line = next(row for row in captured.out.splitlines() if row.startswith("G001+G040"))
    assert "OUT OF DOMAIN" in line and "p=" not in line and "never perturbed in training: G040" in line
    assert "1 of 2 out of domain" in captured.err


def test_a_triple_is_refused_in_one_line_before_any_work(tmp_path, capsys):
    pred = tmp_path / "pred.h5ad"
    code = main(["perturbation", "predict", "--control", str(EXAMPLE_CONTROL), "--perturbations",
                 "G001+G002,G001+G002+G003", "--n-cells", "8", "--output", str(pred)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and not pred.exists()
    assert "'G001+G002+G003': 3 genes" in err[-1] and "predicts single and double perturbations" in err[-1]


def test_a_named_condition_column_that_the_control_file_lacks_names_the_file(tmp_path, capsys):
    code = main(["perturbation", "predict", "--control", str(EXAMPLE_CONTROL), "--perturbations", "G001",
                 "--condition-key", "cond", "--n-cells", "8", "--output", str(tmp_path / "pred.h5ad")])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and "grn_control.h5ad: obs has no column 'cond'" in err


def test_controls_from_another_simulator_are_flagged(tmp_path, capsys):
    ctrl = cooperative_controls(tmp_path / "coop.h5ad")
    pred = tmp_path / "pred.h5ad"
    assert main(["perturbation", "predict", "--control", str(ctrl), "--perturbations", "G001+G002,G003",
                 "--n-cells", "4", "--output", str(pred)]) == 0
    eff = ad.read_h5ad(pred).uns["perturbation_effects"]
    assert not eff["in_domain"].any() and (eff["domain_pvalue"] <= 0.05).all()
    assert all("control cells unlike the training controls" in n for n in eff["notes"])
    assert np.isfinite(eff["lower"]).all()  # the band is still reported, marked as carrying no guarantee
