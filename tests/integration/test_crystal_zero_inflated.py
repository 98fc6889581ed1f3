"""A zero-inflated target end to end (band gaps): fit → export → predict on a gzipped CSV with 0 for 'metals'."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from sciml.cli.main import main
from sciml.testing.fixtures import write_perovskite_csv

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "structures"


def _band_gap_csv(tmp: Path) -> Path:
    table = pd.read_csv(write_perovskite_csv(tmp / "toy.csv", n=160, seed=3), index_col=0)  # calib 24: a domain test
    h = table["heat_all"].to_numpy()
    table["band_gap"] = np.clip(h - np.quantile(h, 0.4), 0.0, None)  # the 40% lowest are 'metals' (gap 0)
    path = tmp / "toy_gaps.csv.gz"
    table.drop(columns="heat_all").to_csv(path)
    return path


def test_band_gap_model_is_never_negative_and_says_p_metal(tmp_path):
    cfg = yaml.safe_load((ROOT / "configs" / "crystal" / "mp-band-gap.yaml").read_text())
    cfg |= {"run_dir": str(tmp_path / "run"), "threads": 1}
    cfg["data"] |= {"path": str(_band_gap_csv(tmp_path)), "batch_size": 16, "cache": str(tmp_path / "cache"),
                    "workers": 1, "split": {"fractions": [0.6, 0.1, 0.15, 0.15], "seed": 1}}
    cfg["model"]["network"] |= {"dim": 16, "n_layers": 1}
    cfg["trainer"] |= {"max_epochs": 2, "enable_progress_bar": False, "enable_model_summary": False}
    config = tmp_path / "gap.yaml"
    config.write_text(yaml.safe_dump(cfg))
    assert main(["fit", "--config", str(config)]) == 0
    assert list((tmp_path / "cache").glob("graphs-*.pt"))  # the graphs were cached for the next run
    artifact = tmp_path / "artifact"
    assert main(["export", "--ckpt", str(tmp_path / "run" / "checkpoints" / "best.ckpt"), "--calibrate",
                 "--output", str(artifact)]) == 0
    calibrator = json.loads((artifact / "calibrator.json").read_text())
    assert calibrator["method"] == "conditional_hurdle"  # the shipped recipe: per class and per group
    assert calibrator["group_by"] == ["n_elements", "size_range", "crystal_system"]
    assert (artifact / "domain.json").is_file()  # fitted without a shift subset (hurdle sets have no shift mode)
    metrics = json.loads((artifact / "metadata.json").read_text())["metrics"]
    assert {"test_coverage_zero", "test_coverage_positive", "test_roc_auc_zero"} <= set(metrics)
    out = tmp_path / "gaps.csv"
    assert main(["crystal", "predict", "--model", str(artifact), str(EXAMPLES), "--output", str(out)]) == 0
    df = pd.read_csv(out, comment="#")
    assert len(df) == len(list(EXAMPLES.iterdir())) and df["error"].isna().all()
    assert (df["band_gap"] >= 0).all() and (df["band_gap_lower"] >= 0).all()
    assert (df["band_gap_lower"] <= df["band_gap"]).all() and (df["band_gap"] <= df["band_gap_upper"]).all()
    assert df["p_metal"].between(0, 1).all()
    assert df["metal_in_set"].dtype == bool and (df.loc[df["metal_in_set"], "band_gap_lower"] == 0).all()
    metal = (df["p_metal"] >= 0.5) & df["metal_in_set"]  # the median is 0 and the set holds it
    assert (df.loc[metal, "band_gap"] == 0).all() and (df.loc[~metal, "band_gap"] > 0).all()
