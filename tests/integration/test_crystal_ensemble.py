"""``sciml crystal ensemble``: trained models of one config joined into one exported, calibrated mean ensemble."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from torch_geometric.data import Batch

from sciml.cli.main import main
from sciml.core.io.artifact import ArtifactError
from sciml.core.io.checkpoint import load_lightning_checkpoint
from sciml.core.training.init import init_weights
from sciml.crystal.artifact import embedding_dim, load_model
from sciml.crystal.data.graphs import structure_to_graph
from sciml.crystal.data.sources import read_labelled
from sciml.crystal.ensemble import ensemble_state
from sciml.crystal.module import CrystalRegressor


def moved_member(tiny_run, path, seed: int, **hparams):
    """Another network of the tiny run's config: its trained weights moved at random (batch-norm statistics kept)."""
    state = load_lightning_checkpoint(tiny_run["run"] / "checkpoints" / "best.ckpt")
    gen = torch.Generator().manual_seed(seed)
    state["state_dict"] = {k: v if "running_" in k or not v.is_floating_point()
                           else v + 0.05 * torch.randn(v.shape, generator=gen, dtype=v.dtype)
                           for k, v in state["state_dict"].items()}
    state["hyper_parameters"] = state["hyper_parameters"] | hparams
    torch.save(state, path)
    return path


def module_of(path) -> CrystalRegressor:
    state = load_lightning_checkpoint(path)
    module = CrystalRegressor(**state["hyper_parameters"])
    module.load_state_dict(state["state_dict"])
    return module.eval()


def test_ensemble_is_exported_calibrated_and_predicts_the_members_mean(tiny_run, tmp_path):
    best = tiny_run["run"] / "checkpoints" / "best.ckpt"
    other = moved_member(tiny_run, tmp_path / "other.ckpt", seed=1)
    ckpt, artifact = tmp_path / "ensemble.ckpt", tmp_path / "ensemble"
    assert main(["crystal", "ensemble", str(tiny_run["artifact"]), str(other), "--output", str(ckpt)]) == 0
    assert main(["export", "--ckpt", str(ckpt), "--config", str(tiny_run["config"]), "--calibrate",
                 "--output", str(artifact)]) == 0
    metadata = json.loads((artifact / "metadata.json").read_text())
    assert metadata["metrics"]["test_coverage"] > 0 and (artifact / "calibrator.json").is_file()

    predictor = load_model(artifact)
    table = read_labelled(str(tiny_run["data"]), "heat_all")
    batch = Batch.from_data_list([structure_to_graph(s, predictor.graph) for s in table["structure"][:16]])
    with torch.no_grad():
        mean = predictor.module(batch)
        members = torch.stack([module_of(best)(batch), module_of(other)(batch)])
    assert not torch.allclose(members[0], members[1])
    torch.testing.assert_close(mean, members.mean(0), rtol=1e-5, atol=1e-6)

    # a domain test reads the first member's embedding; its width checks domain.json when an ensemble loads
    pooled = predictor.module.net.embed(batch)
    assert embedding_dim(predictor.module.net.head, "pooled") == pooled.shape[1]
    out = tmp_path / "preds.csv"
    assert main(["crystal", "predict", "--model", str(artifact), str(tiny_run["data"]), "--output", str(out)]) in (0, 3)
    rows = pd.read_csv(out, comment="#")
    assert len(rows) == len(table["structure"]) and rows["heat_all"].notna().all()


def test_members_of_other_configs_are_refused(tiny_run, tmp_path, capsys):
    art = tiny_run["artifact"]
    with pytest.raises(ArtifactError, match="at least 2 members"):
        ensemble_state([art])
    target = dict(load_lightning_checkpoint(tiny_run["run"] / "checkpoints" / "best.ckpt")["hyper_parameters"]
                  ["target"]) | {"mean": 123.0}
    with pytest.raises(ArtifactError, match=r"other.ckpt: its target differ from those of .*\(mean: 123.0 here, "):
        ensemble_state([art, moved_member(tiny_run, tmp_path / "other.ckpt", seed=2, target=target)])
    joined = tmp_path / "joined.ckpt"
    assert main(["crystal", "ensemble", str(art), str(art), "--output", str(joined)]) == 0
    with pytest.raises(ArtifactError, match="joined.ckpt: not a single crystal network"):
        ensemble_state([art, joined])
    capsys.readouterr()
    assert main(["crystal", "ensemble", str(art), str(art), "--output", str(joined)]) != 0
    assert "--overwrite" in capsys.readouterr().err


def test_fine_tuning_from_an_ensemble_starts_from_its_first_member(tiny_run, tmp_path):
    best = tiny_run["run"] / "checkpoints" / "best.ckpt"
    ckpt = tmp_path / "ensemble.ckpt"
    assert main(["crystal", "ensemble", str(best), str(moved_member(tiny_run, tmp_path / "other.ckpt", seed=3)),
                 "--output", str(ckpt)]) == 0
    module = module_of(moved_member(tiny_run, tmp_path / "start.ckpt", seed=4))  # weights unlike either member
    init_weights(module, ckpt)
    first = load_lightning_checkpoint(best)["state_dict"]
    for name, value in module.state_dict().items():
        assert torch.equal(value, first[name]), name
