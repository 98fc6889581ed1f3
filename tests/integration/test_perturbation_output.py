"""``sciml perturbation predict`` output as scored by the field: control cells, condition labels, counts layer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sciml.cli.main import main

ad = pytest.importorskip("anndata")
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_CONTROL = ROOT / "examples" / "cells" / "grn_control.h5ad"
ARGS = ["perturbation", "predict", "--perturbations", "G001+G002,G003", "--n-cells", "30", "--seed", "2"]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """The shipped model on the example controls: default output, --no-control, and a scPerturb-style control file."""
    tmp = tmp_path_factory.mktemp("output")
    ctrl = ad.read_h5ad(EXAMPLE_CONTROL)
    scp = ctrl.copy()
    scp.obs = scp.obs.rename(columns={"condition": "perturbation"})
    scp.obs["perturbation"] = "control"
    scp.write_h5ad(tmp / "scperturb.h5ad")
    runs = {"default": ["--control", str(EXAMPLE_CONTROL)],
            "no_control": ["--control", str(EXAMPLE_CONTROL), "--no-control"],
            "key": ["--control", str(tmp / "scperturb.h5ad"), "--condition-key", "perturbation", "--control-label",
                    "control"]}
    out = {}
    for name, extra in runs.items():
        assert main([*ARGS, *extra, "--output", str(tmp / f"{name}.h5ad")]) == 0
        out[name] = ad.read_h5ad(tmp / f"{name}.h5ad")
    return ctrl, out


def test_control_cells_are_written_by_default_and_left_out_on_request(outputs):
    ctrl, out = outputs
    a, b = out["default"], out["no_control"]
    assert a.n_obs == 60 + ctrl.n_obs and b.n_obs == 60
    assert a.obs["condition"].value_counts().to_dict() == {"ctrl": 200, "G001+G002": 30, "G003+ctrl": 30}
    np.testing.assert_array_equal(a.X[60:], ctrl.X)
    assert set(b.obs["condition"]) == {"G001+G002", "G003+ctrl"}
    np.testing.assert_array_equal(a.X[:60], b.X)  # the generated cells do not depend on the flag
    np.testing.assert_array_equal(a.layers["counts"][:60].toarray(), b.layers["counts"].toarray())
    assert a.uns["perturbation_predict"]["n_control_cells_written"] == 200
    assert b.uns["perturbation_predict"]["n_control_cells_written"] == 0


def test_generated_cells_are_the_models_prediction(outputs):
    from sciml.perturbation import load_model, predict_effects

    ctrl, out = outputs
    result = predict_effects(load_model(), np.asarray(ctrl.X), ["G001+G002", "G003"], 30, seed=2)
    np.testing.assert_array_equal(out["default"].X[:60], result["cells"].reshape(60, -1))
    np.testing.assert_array_equal(out["default"].uns["perturbation_effects"]["effect"], result["effect"])


def test_condition_key_and_control_label_are_kept(outputs):
    _, out = outputs
    a = out["key"]
    assert a.obs["perturbation"].value_counts().to_dict() == {"control": 200, "G001+G002": 30, "G003": 30}
    assert a.obs["condition"].value_counts().to_dict() == {"ctrl": 200, "G001+G002": 30, "G003+ctrl": 30}
    meta = a.uns["perturbation_predict"]
    assert meta["condition_key"] == "perturbation" and meta["control_label"] == "control"
    np.testing.assert_array_equal(a.X, out["default"].X)


def test_counts_layer_is_integer_and_follows_the_controls(outputs):
    """Without control counts the library is the target sum: a control cell's counts total ~ Poisson(10⁴)."""
    _, out = outputs
    counts = out["default"].layers["counts"]
    assert counts.dtype == np.int32 and counts.min() >= 0 and counts.shape == out["default"].shape
    total = np.asarray(counts.sum(1)).ravel()
    expected = np.expm1(out["default"].X.astype(np.float64)).sum(1)
    assert (np.abs(total - expected) < 5 * np.sqrt(expected)).all()
    assert abs(np.median(total[60:]) / 1e4 - 1) < 0.01
