"""End to end on a tiny simulated screen: sciml fit → sciml export --calibrate → sciml perturbation predict."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from sciml.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
ad = pytest.importorskip("anndata")

SIM = dict(seed=0, n_genes=20, n_masters=4, n_regulators=8, n_singles=6, n_doubles=8, cells_per_condition=40,
           control_cells=120)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    """A model trained for 3 steps on the real grn_default config (shrunk), exported with bands."""
    from sciml.perturbation.data.anndata_io import write_h5ad
    from sciml.perturbation.sim.simulate import simulate

    tmp = tmp_path_factory.mktemp("pert")
    data = write_h5ad(simulate(SIM), tmp / "sim.h5ad")
    cfg = yaml.safe_load((ROOT / "configs" / "perturbation" / "grn_default.yaml").read_text())
    cfg["run_dir"] = str(tmp / "run")
    cfg["data"] |= {"path": str(data), "cells_per_condition": 8, "conditions_per_batch": 2, "steps_per_epoch": 3,
                    "knn": 5}
    cfg["model"]["network"] |= {"dim": 16, "depth": 1, "heads": 2}
    cfg["model"]["flow"] |= {"steps": 2, "method": "euler", "val_steps": 1}
    cfg["trainer"] |= {"max_epochs": 1, "enable_model_summary": False, "log_every_n_steps": 1}
    (tmp / "tiny.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["fit", "--config", str(tmp / "tiny.yaml")]) == 0
    out = tmp / "model"
    assert main(["export", "--ckpt", str(tmp / "run" / "checkpoints" / "best.ckpt"), "--calibrate", "--alpha", "0.5",
                 "--output", str(out)]) == 0
    return out, data, tmp


def test_export_writes_a_perturbation_artifact(artifact):
    out, _, _ = artifact
    from sciml.perturbation import load_model

    predictor = load_model(out)
    assert predictor.genes == [f"G{i:03d}" for i in range(20)]
    assert predictor.bands is not None and predictor.bands.alpha == 0.5
    assert "Conditional flow-matching" in (out / "README.md").read_text()
    m = predictor.module  # the recipe's joint singles travel in the artifact (fitted with the training doubles)
    assert m.prior_settings.denoise == "eb_joint" and "eb_joint" in (out / "README.md").read_text()
    known = m.has_effect
    assert not torch.allclose(m.joint_effect[m.rows[known]], m.single_effect[m.rows[known]])


def test_predict_writes_cells_effects_and_plots(artifact, capsys):
    out, data, tmp = artifact
    pred = tmp / "pred.h5ad"
    rc = main(["perturbation", "predict", "--model", str(out), "--control", str(data), "--perturbations",
               "G003+G000, G002", "--n-cells", "12", "--output", str(pred), "--plot"])
    assert rc == 0
    a = ad.read_h5ad(pred)
    assert a.shape == (24 + 120, 20) and list(a.var_names[:2]) == ["G000", "G001"]  # + the file's 120 controls
    assert a.obs["condition"].value_counts().to_dict() == {"ctrl": 120, "G000+G003": 12, "G002+ctrl": 12}
    eff = a.uns["perturbation_effects"]
    assert list(eff["conditions"]) == ["G000+G003", "G002+ctrl"]
    assert eff["effect"].shape == (2, 20)
    assert (eff["lower"] <= eff["effect"]).all() and (eff["effect"] <= eff["upper"]).all()
    assert (tmp / "pred_pca.png").stat().st_size > 1000 and (tmp / "pred_effects.png").stat().st_size > 1000
    assert "cells/s" in capsys.readouterr().err


def test_predict_unseen_measured_gene_uses_graph_embedding(artifact, capsys):
    out, data, tmp = artifact
    rc = main(["perturbation", "predict", "--model", str(out), "--control", str(data), "--perturbations", "G019",
               "--n-cells", "4", "--output", str(tmp / "unseen.h5ad")])
    assert rc == 0
    assert "graph embedding only" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "message"), [
    (["--perturbations", "G001+NOTAGENE"], "NOTAGENE"),
    (["--perturbations", " , "], "--perturbations is empty"),
    (["--n-cells", "0"], "--n-cells"),
    (["--predict-genes", "some"], "--predict-genes must be a number >= 1 or 'all'"),
    (["--alpha", "1.5"], "--alpha"),
    (["--output", "pred.csv"], ".h5ad"),
    (["--control", "missing.h5ad"], "missing.h5ad"),
    (["--model", "no_such_model"], "no_such_model"),
])
def test_bad_input_is_one_line_error(artifact, capsys, args, message):
    out, data, tmp = artifact
    base = {"--model": str(out), "--control": str(data), "--perturbations": "G002", "--output": str(tmp / "x.h5ad")}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value if flag != "--control" else str(tmp / value)
    argv = ["perturbation", "predict"] + [item for pair in base.items() for item in pair]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0]


def test_control_file_without_model_genes_is_rejected(artifact, capsys):
    out, data, tmp = artifact
    a = ad.read_h5ad(data)[:, 2:].copy()
    a.write_h5ad(tmp / "fewer_genes.h5ad")
    rc = main(["perturbation", "predict", "--model", str(out), "--control", str(tmp / "fewer_genes.h5ad"),
               "--perturbations", "G002", "--output", str(tmp / "y.h5ad")])
    assert rc == 2
    assert "G000" in capsys.readouterr().err


def test_generated_cells_depend_on_seed_only(artifact):
    from sciml.perturbation import load_model, predict_effects

    out, data, _ = artifact
    predictor = load_model(out)
    ctrl = ad.read_h5ad(data)
    ctrl = np.asarray(ctrl[ctrl.obs["condition"] == "ctrl"].X)
    a = predict_effects(predictor, ctrl, ["G002"], 6, seed=3)["cells"]
    b = predict_effects(predictor, ctrl, ["G002", "G000+G003"], 6, seed=3)["cells"][:1]
    np.testing.assert_array_equal(a, b)


EXAMPLE_CONTROL = ROOT / "examples" / "cells" / "grn_control.h5ad"


def test_shipped_checkpoint_predicts_from_example_controls(tmp_path, capsys):
    """The README's command: the embedded default model on the shipped control cells."""
    from sciml.perturbation import DEFAULT_MODEL, load_model

    pred = tmp_path / "pred.h5ad"
    assert main(["perturbation", "predict", "--control", str(EXAMPLE_CONTROL), "--perturbations", "G001+G002,G003",
                 "--n-cells", "20", "--output", str(pred)]) == 0
    a = ad.read_h5ad(pred)
    assert a.shape == (240, 100) and set(a.obs["condition"]) == {"G001+G002", "G003+ctrl", "ctrl"}  # + 200 controls
    eff = a.uns["perturbation_effects"]
    assert np.isfinite(eff["lower"]).all() and (eff["upper"] > eff["lower"]).all()
    predictor = load_model()
    assert predictor.path == DEFAULT_MODEL and predictor.bands is not None
    meta = predictor.module.config
    assert len(meta["genes"]) == 100 and (DEFAULT_MODEL / "weights.safetensors").stat().st_size < 2_000_000


def test_infinite_bands_are_explained_in_one_line(tmp_path, capsys):
    """The shipped model has 6 calibration conditions: α = 0.1 needs the 7th smallest score, so bands are infinite."""
    pred = tmp_path / "pred.h5ad"
    assert main(["perturbation", "predict", "--control", str(EXAMPLE_CONTROL), "--perturbations", "G003",
                 "--n-cells", "4", "--alpha", "0.1", "--output", str(pred)]) == 0
    eff = ad.read_h5ad(pred).uns["perturbation_effects"]
    assert np.isneginf(eff["lower"]).all() and np.isposinf(eff["upper"]).all() and eff["n_calib"] == 6
    err = capsys.readouterr().err.splitlines()
    notes = [line for line in err if line.startswith("note:")]
    assert notes == ["note: at α=0.1 the interval needs the 7-th smallest of 6 calibration conditions, so it is "
                     "infinite; the smallest α with finite intervals is 0.15 (--alpha 0.15)"]
    assert any(line.startswith("perturbation predict: loaded") for line in err)


def test_effects_plot_states_alpha_and_labels_every_mark(artifact, monkeypatch, tmp_path):
    import matplotlib.pyplot as plt

    import sciml.perturbation.plot as plot
    from sciml.perturbation import load_model, predict_effects

    out, data, _ = artifact
    predictor = load_model(out)
    ctrl = ad.read_h5ad(data)
    ctrl = np.asarray(ctrl[ctrl.obs["condition"] == "ctrl"].X)
    figures = []
    monkeypatch.setattr(plot, "save_png", lambda fig, path: figures.append(fig) or Path(path))
    n = predictor.bands.calibrator.n_calib
    for alpha in (0.5, 0.5 / (n + 1)):
        plot.plot_effects(tmp_path / "effects.png", predict_effects(predictor, ctrl, ["G002"], 4, alpha=alpha),
                          predictor.genes, top=5)
    finite, infinite = (fig.axes[0] for fig in figures)
    legend = [t.get_text() for t in finite.get_legend().get_texts()]
    assert legend == ["predicted mean effect", "50% conformal band, simultaneous over genes (α = 0.5)", "zero effect"]
    assert finite.get_xlabel().startswith("gene (top 5") and "log1p" in finite.get_ylabel()
    assert len(finite.collections) == 2  # the band (vertical bars) and the dots
    band = [t.get_text() for t in infinite.get_legend().get_texts()][1]
    assert band.startswith(f"band infinite at α = {0.5 / (n + 1):g}: {n} calibration conditions")
    assert len(infinite.collections) == 1  # no band drawn, only the dots
    for fig in figures:
        plt.close(fig)


def test_calibrate_refits_the_bands_and_adds_the_domain_without_touching_the_weights(artifact, capsys):
    import json

    out, data, tmp = artifact
    bands = tmp / "rebanded"
    assert main(["perturbation", "calibrate", "--model", str(out), "--operation", "conformal", "--alpha", "0.2",
                 "--n-cells", "16", "--output", str(bands)]) == 0
    assert "before" in capsys.readouterr().out
    old, new = (json.loads((p / "metadata.json").read_text()) for p in (out, bands))
    assert new["weights_sha256"] == old["weights_sha256"] and "recalibration" not in old
    assert new["recalibration"]["alpha"] == 0.2 and new["recalibration"]["before"]["n_test"] > 0
    from sciml.perturbation import load_model

    assert load_model(bands).bands.alpha == 0.2 and load_model(out).bands.alpha == 0.5  # the source is unchanged
    (bands / "domain.json").unlink()  # a model without its domain test gets one back
    meta = json.loads((bands / "metadata.json").read_text())
    meta["extra_files"].pop("domain.json")
    (bands / "metadata.json").write_text(json.dumps(meta))
    assert main(["calibrate", "--model", str(bands), "--operation", "domain"]) == 0  # forwarded by family
    assert json.loads((bands / "domain.json").read_text()) == json.loads((out / "domain.json").read_text())
    assert "calibrate --operation domain" in (bands / "README.md").read_text()


def test_calibrate_checks_its_arguments_and_names_moved_data(artifact, tmp_path, capsys):
    out, _, _ = artifact
    assert main(["perturbation", "calibrate", "--model", str(out), "--operation", "domain", "--alpha", "0.1"]) == 2
    assert "--alpha applies to --operation conformal" in capsys.readouterr().err
    moved = tmp_path / "moved.h5ad"
    assert main(["perturbation", "calibrate", "--model", str(out), "--operation", "domain", "--data",
                 str(moved)]) == 2
    assert f"{moved}: no such file" in capsys.readouterr().err
