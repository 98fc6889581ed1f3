"""``init_from``: a fit starts from trained weights (an artifact folder or a checkpoint) and refuses other networks."""

from __future__ import annotations

import pytest
import torch
import yaml

from sciml.cli.main import main
from sciml.core.config import check_config
from sciml.core.io.artifact import ArtifactError
from sciml.core.io.checkpoint import load_lightning_checkpoint
from sciml.core.registry import build_task
from sciml.core.training.init import init_weights


def _module(config):
    cfg = check_config(yaml.safe_load(config.read_text()))
    return build_task(cfg, None)[1]


@pytest.mark.parametrize("source", ["artifact", "ckpt"])
def test_init_weights_copies_every_tensor(tiny_run, source):
    path = tiny_run["artifact"] if source == "artifact" else tiny_run["run"] / "checkpoints" / "best.ckpt"
    trained = load_lightning_checkpoint(tiny_run["run"] / "checkpoints" / "best.ckpt")["state_dict"]
    module = _module(tiny_run["config"])
    assert any(not torch.equal(v, trained[k]) for k, v in module.state_dict().items())  # a fresh init differs
    init_weights(module, path)
    for name, value in module.state_dict().items():
        assert torch.equal(value, trained[name]), name


def test_fit_with_init_from_starts_at_the_source_weights(tiny_run, tmp_path):
    """One epoch at a learning rate of 1e-12 leaves the source's weights: the run started from them.

    Batch-norm running statistics move with the data whatever the learning rate; the trained parameters do not.
    """
    run = tmp_path / "refine"
    assert main(["fit", "--config", str(tiny_run["config"]), "--init_from", str(tiny_run["artifact"]),
                 "--run_dir", str(run), "--model.optim.lr", "1e-12", "--model.optim.scheduler", "none",
                 "--trainer.max_epochs", "1"]) == 0
    trained = load_lightning_checkpoint(tiny_run["run"] / "checkpoints" / "best.ckpt")["state_dict"]
    after = load_lightning_checkpoint(run / "checkpoints" / "last.ckpt")["state_dict"]
    for name, value in after.items():
        if "running_" in name or "num_batches_tracked" in name:
            continue
        torch.testing.assert_close(value, trained[name], rtol=0, atol=1e-9, msg=name)
    assert yaml.safe_load((run / "config.yaml").read_text())["init_from"] == str(tiny_run["artifact"])


def test_other_network_is_refused_in_one_line(tiny_run, tmp_path, capsys):
    code = main(["fit", "--config", str(tiny_run["config"]), "--init_from", str(tiny_run["artifact"]),
                 "--run_dir", str(tmp_path / "wider"), "--model.network.dim", "24"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0
    assert "init_from" in err[-1] and "network" in err[-1] and "dim" in err[-1]
    assert not (tmp_path / "wider" / "checkpoints").exists()


def test_other_graph_is_refused_and_other_elements_are_not(tiny_run):
    """Crystal weights mean the same for any element set (atoms are embedded by Z), not for another graph."""
    module = _module(tiny_run["config"])
    module.hparams["elements"] = module.hparams["elements"][:2]  # fine-tuning data with fewer elements
    init_weights(module, tiny_run["artifact"])
    module.hparams["graph"] = module.hparams["graph"] | {"cutoff": 5.0}
    with pytest.raises(ArtifactError, match="graph differ.*cutoff: 8.0 there, 5.0 here"):
        init_weights(module, tiny_run["artifact"])



def test_unreadable_source_names_the_file(tiny_run, tmp_path):
    bad = tmp_path / "model.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(ArtifactError, match="model.pt"):
        init_weights(_module(tiny_run["config"]), bad)
    with pytest.raises(ArtifactError, match="no-such-model"):
        init_weights(_module(tiny_run["config"]), tmp_path / "no-such-model")
