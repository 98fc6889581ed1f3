"""Build the crystal data module and regressor from a config dict."""

from __future__ import annotations

from pathlib import Path

from sciml.crystal.data.datamodule import CrystalDataModule
from sciml.crystal.module import CrystalRegressor


def datamodule(cfg: dict, run_dir: Path | None = None) -> CrystalDataModule:
    """The data module of ``cfg["data"]``, set up (read, featurised, split)."""
    dm = CrystalDataModule(**cfg["data"], run_dir=str(run_dir) if run_dir else None)
    dm.setup()
    return dm


def build(cfg: dict, run_dir: Path | None = None) -> tuple[CrystalDataModule, CrystalRegressor]:
    """Data module plus a regressor whose normalisation and element vocabulary come from the train split."""
    dm = datamodule(cfg, run_dir)
    data = cfg["data"]
    target = {"name": data["target"], "unit": data.get("unit", ""), "extensive": bool(data.get("extensive")),
              "mean": dm.target_mean, "std": dm.target_std}
    if data.get("zero_inflated"):
        target |= {"zero_inflated": True, "zero_label": data.get("zero_label", "zero")}
    model = CrystalRegressor(network=cfg["model"]["network"], graph=dm.graph.to_dict(), target=target,
                             elements=dm.elements, optim=cfg["model"].get("optim"))
    return dm, model
