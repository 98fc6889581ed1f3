"""``export``: turn a Lightning checkpoint into a calibrated, self-describing artifact (DESIGN §4)."""

from __future__ import annotations

from math import nan
from pathlib import Path

import yaml

from sciml.data.crystal import file_sha256
from sciml.io.artifact import save_artifact
from sciml.io.checkpoint import load_lightning_checkpoint
from sciml.models.crystal import CrystalRegressor
from sciml.tasks import DATAMODULES
from sciml.uq import coverage, mean_width
from sciml.uq.callback import collect_predictions
from sciml.uq.groups import build_calibrator, fit_calibrator, loader_structures, predict_interval


def find_run_config(ckpt: Path) -> dict:
    """The ``config.yaml`` a run wrote next to its ``checkpoints/`` folder."""
    for folder in (ckpt.parent, ckpt.parent.parent):
        if (folder / "config.yaml").is_file():
            return yaml.safe_load((folder / "config.yaml").read_text())
    raise FileNotFoundError(f"{ckpt}: no config.yaml in the run folder; pass --config")


def model_card(name: str, cfg: dict, metrics: dict, sizes: dict, alpha: float) -> str:
    """Markdown model card: data, split, metrics, intended use, limits."""
    t = cfg["module"]["target"]
    lines = [f"# {name}", "", f"Crystal property model (`{cfg['module']['network']['name']}`) predicting "
             f"`{t['name']}` in {t['unit'] or 'the dataset unit'} ({'extensive' if t['extensive'] else 'intensive'}).",
             "", "## Data", f"- source: `{cfg['data']['path']}` (sha256 `{metrics['data_sha256'][:16]}…`)",
             f"- seeded split {sizes} (seed {cfg['data'].get('split', {}).get('seed')})", "",
             "## Metrics on the test split",
             f"- MAE: {metrics['test_mae']:.4f} {t['unit']}",
             f"- {100 * (1 - alpha):.0f}% conformal interval: coverage {metrics.get('test_coverage', nan):.3f}, "
             f"mean width {metrics.get('test_width', nan):.4f} {t['unit']}", "",
             "## Intended use and limits",
             f"- Elements seen in training: {', '.join(cfg['module']['elements'])}. Other elements (Z <= 103) are "
             "embedded from their descriptors only and flagged in the `note` column: extrapolation.",
             "- Intervals are split-conformal: marginal coverage ≥ 1−α for structures exchangeable with the "
             "training distribution; no guarantee under distribution shift (other structure families).",
             f"- Graph settings are frozen: {cfg['module']['graph']}.", ""]
    return "\n".join(lines)


def export(ckpt: str | Path, output: str | Path, calibrate: bool = True, alpha: float = 0.1,
           config: dict | None = None, score: str | None = None) -> dict:
    """Export the checkpoint ``ckpt`` to the artifact folder ``output``; return the measured metrics."""
    ckpt = Path(ckpt)
    state = load_lightning_checkpoint(ckpt)
    cfg = config or find_run_config(ckpt)
    if cfg.get("task") == "hamiltonian":
        from sciml.hamiltonian.export import export_hamiltonian

        return export_hamiltonian(ckpt, state, output, cfg, calibrate, alpha, score)
    if cfg.get("task") == "perturbation":  # effect bands over conditions
        from sciml.perturbation.export import export_perturbation

        return export_perturbation(ckpt, state, output, cfg, calibrate=calibrate, alpha=alpha)
    if cfg.get("task") != "crystal":
        raise ValueError(f"export supports task 'crystal' for now, config says {cfg.get('task')!r}")
    hparams = dict(state["hyper_parameters"])
    module = CrystalRegressor(**hparams)
    module.load_state_dict(state["state_dict"], strict=True)
    dm = DATAMODULES["crystal"](cfg, None)
    score = score or cfg.get("calibration", {}).get("score", "absolute")
    mean, sigma, y = collect_predictions(module, dm.test_dataloader())
    metrics = {"test_mae": float((mean - y).abs().mean()), "data_sha256": file_sha256(cfg["data"]["path"])}
    calibrator = None
    if calibrate:
        cal = build_calibrator(cfg.get("calibration"), score, alpha)  # split, or mondrian with group_by
        cal_mean, cal_sigma, cal_y = (t.double() for t in collect_predictions(module, dm.calib_dataloader()))
        fit_calibrator(cal, cal_mean, cal_y, cal_sigma, loader_structures(cal, dm.calib_dataloader()))
        interval = predict_interval(cal, mean.double(), sigma.double(), alpha,
                                    loader_structures(cal, dm.test_dataloader()))
        metrics |= {"test_coverage": float(coverage(interval, y.double())),
                    "test_width": float(mean_width(interval)), "alpha": alpha,
                    "n_calib": int(cal.scores.numel())}
        calibrator = cal.to_dict()
    art_cfg = {"task": "crystal", "module": hparams, "data": cfg["data"]}
    metadata = {"task": "crystal", "target": {k: hparams["target"][k] for k in ("name", "unit", "extensive")},
                "elements": hparams["elements"], "graph": hparams["graph"], "split_sizes": dm.split_sizes(),
                "metrics": metrics, "source_checkpoint": ckpt.name}
    card = model_card(Path(output).name, art_cfg, metrics, dm.split_sizes(), alpha)
    save_artifact(output, config=art_cfg, state_dict=module.state_dict(), metadata=metadata,
                  calibrator=calibrator, card=card)
    return metrics

