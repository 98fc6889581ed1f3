"""``export``: turn a Lightning checkpoint into a calibrated, self-describing artifact (docs/design.md §4)."""

from __future__ import annotations

from math import nan
from pathlib import Path

from sciml.core.io import card
from sciml.core.io.artifact import save_artifact
from sciml.core.io.checksum import sha256_file
from sciml.crystal.calibration import graph_structures
from sciml.crystal.data.sources import labels_file
from sciml.crystal.module import CrystalRegressor
from sciml.crystal.task import datamodule
from sciml.uq import coverage, mean_width
from sciml.uq.callback import collect_predictions
from sciml.uq.groups import build_calibrator, fit_calibrator, loader_structures, predict_interval


def model_card(name: str, cfg: dict, metrics: dict, sizes: dict, alpha: float) -> str:
    """Markdown model card (:func:`sciml.core.io.card.model_card`) filled with the crystal sections."""
    t = cfg["module"]["target"]
    summary = (f"Crystal property model (`{cfg['module']['network']['name']}`) predicting `{t['name']}` in "
               f"{t['unit'] or 'the dataset unit'} ({'extensive' if t['extensive'] else 'intensive'}).")
    data = [f"- source: `{cfg['data']['path']}` (sha256 `{metrics['data_sha256'][:16]}…`)",
            f"- seeded split {sizes} (seed {cfg['data'].get('split', {}).get('seed')})"]
    measured = [f"- MAE: {metrics['test_mae']:.4f} {t['unit']}",
                f"- {100 * (1 - alpha):.0f}% conformal interval: coverage {metrics.get('test_coverage', nan):.3f}, "
                f"mean width {metrics.get('test_width', nan):.4f} {t['unit']}"]
    limits = [f"- Elements seen in training: {', '.join(cfg['module']['elements'])}. Other elements (Z <= 103) are "
              "embedded from their descriptors only and flagged in the `note` column: extrapolation.",
              "- Intervals are split-conformal: marginal coverage ≥ 1−α for structures exchangeable with the "
              "training distribution; no guarantee under distribution shift (other structure families).",
              f"- Graph settings are frozen: {cfg['module']['graph']}."]
    return card.model_card(name, summary, data=data, metrics=measured, limits=limits)


def export(ckpt: str | Path, state: dict, output: str | Path, cfg: dict, calibrate: bool = True,
           alpha: float = 0.1, score: str | None = None) -> dict:
    """Export the checkpoint ``ckpt`` (already loaded as ``state``, trained with ``cfg``) to ``output``.

    Returns the metrics measured on the test split (MAE, and coverage and width with ``calibrate``).
    """
    ckpt = Path(ckpt)
    module = CrystalRegressor(**state["hyper_parameters"])
    module.load_state_dict(state["state_dict"], strict=True)
    hparams = dict(module.hparams)  # as the module keeps them (retired network keys dropped)
    dm = datamodule(cfg, None)
    score = score or cfg.get("calibration", {}).get("score", "absolute")
    mean, sigma, y = collect_predictions(module, dm.test_dataloader())
    data_sha256 = sha256_file(labels_file(cfg["data"]["path"]))
    metrics = {"test_mae": float((mean - y).abs().mean()), "data_sha256": data_sha256}
    calibrator = None
    if calibrate:
        cal = build_calibrator(cfg.get("calibration"), score, alpha)  # split, or mondrian with group_by
        cal_mean, cal_sigma, cal_y = (t.double() for t in collect_predictions(module, dm.calib_dataloader()))
        fit_calibrator(cal, cal_mean, cal_y, cal_sigma, loader_structures(cal, dm.calib_dataloader(), graph_structures))
        interval = predict_interval(cal, mean.double(), sigma.double(), alpha,
                                    loader_structures(cal, dm.test_dataloader(), graph_structures))
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

