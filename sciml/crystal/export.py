"""``export``: turn a Lightning checkpoint into a calibrated, self-describing artifact (docs/design.md §4).

With ``calibrate`` the artifact also gets ``domain.json`` (:mod:`sciml.crystal.domain`): the domain test fitted
on the train split and calibrated on the calib split, and the shift-aware calibration subset.
:func:`sciml.crystal.calibrate.add_domain` (``sciml crystal calibrate --operation domain``) adds it to an artifact
exported before, rebuilding the recorded split from the data, without touching weights, config or calibrator.
"""

from __future__ import annotations

import math
from math import nan
from pathlib import Path

import numpy as np
import torch

from sciml.core import keys
from sciml.core.io import card
from sciml.core.io.artifact import save_artifact
from sciml.core.io.checksum import sha256_file
from sciml.core.training.conformal import collect_predictions
from sciml.crystal.calibration import graph_structures, resolve_group_by
from sciml.crystal.data.sources import labels_file
from sciml.crystal.domain import FILE as DOMAIN_FILE
from sciml.crystal.domain import CrystalDomain, fit_domain
from sciml.crystal.module import CrystalRegressor
from sciml.crystal.task import datamodule
from sciml.uq import bounded_width, coverage, mean_width
from sciml.uq.groups import (
    build_calibrator,
    build_hurdle,
    fit_calibrator,
    hurdle_members,
    loader_structures,
    predict_interval,
)
from sciml.uq.hurdle import HurdleConformal

DOMAIN_BETA = 0.05  # default flag level of exported domain tests


def domain_lines(domain: CrystalDomain, how: str) -> list[str]:
    """Model-card bullets on the applicability domain: what it is, how it was made."""
    d = domain.score
    return [f"- Applicability domain (`domain.json`, {how}): k-NN conformal novelty test (k={d.k}) on the "
            f"`{domain.layer}` embedding (d={d.dim}), reference: {d.reference.shape[0]} of {d.n_train} train-split "
            f"structures (seed {domain.seed}), calibrated on {d.n_calib} calib-split structures. `crystal predict` "
            f"reports `domain_pvalue` and flags `in_domain = false` when p <= {d.beta:g}, an element is unseen or the "
            "cell size is outside the training range ({}-{} atoms): an exchangeable structure is flagged by the "
            "p-value with probability <= {:g}; a flagged row's interval carries no guarantee.".format(
                *domain.train_sizes, d.beta),
            f"- `--shift-aware`: weighted conformal against the batch from {len(domain.shift_scores)} calib-split "
            "embeddings and scores, with an effective-sample-size guard (infinite intervals rather than false "
            "confidence)."]


def model_card(name: str, cfg: dict, metrics: dict, sizes: dict, alpha: float,
               domain: CrystalDomain | None = None) -> str:
    """Markdown model card (:func:`sciml.core.io.card.model_card`) filled with the crystal sections."""
    t = cfg["module"]["target"]
    summary = (f"Crystal property model (`{cfg['module']['network']['name']}`) predicting `{t['name']}` in "
               f"{t['unit'] or 'the dataset unit'} ({'extensive' if t['extensive'] else 'intensive'}).")
    data = [f"- source: `{cfg['data']['path']}` (sha256 `{metrics['data_sha256'][:16]}…`)",
            f"- seeded split {sizes} (seed {cfg['data'].get('split', {}).get('seed')})"]
    measured = [f"- MAE: {metrics['test_mae']:.4f} {t['unit']}",
                f"- {100 * (1 - alpha):.0f}% conformal interval: coverage {metrics.get('test_coverage', nan):.3f}, "
                f"mean width {metrics.get('test_width', nan):.4f} {t['unit']}"
                + (f" (of the bounded sets; {100 * metrics['test_unbounded']:.1f}% unbounded: too few calibration "
                   "structures of their groups)" if metrics.get("test_unbounded") else "")]
    limits = [f"- Elements seen in training: {', '.join(cfg['module']['elements'])}. Other elements (Z <= 103) are "
              "embedded from their descriptors only and flagged in the `note` column: extrapolation.",
              "- Intervals are split-conformal: marginal coverage ≥ 1−α for structures exchangeable with the "
              "training distribution; no guarantee under distribution shift (other structure families).",
              f"- Graph settings are frozen: {cfg['module']['graph']}."]
    if "test_coverage_zero" in metrics:
        label = t.get("zero_label", "zero")
        measured.append(f"- zero-inflated: P({label}) ROC-AUC {metrics['test_roc_auc_zero']:.3f}; coverage among "
                        f"{label}s {metrics['test_coverage_zero']:.3f}, among the others "
                        f"{metrics['test_coverage_positive']:.3f}; MAE among the others "
                        f"{metrics['test_mae_positive']:.4f} {t['unit']}")
        limits.append(f"- Hurdle sets (`sciml.uq.hurdle`): never below 0; whether 0 ({label}) is in the set is a "
                      f"column of its own; thresholds calibrated on the {label}s and on the others separately, so "
                      "each class is covered, not only the average.")
    if isinstance(metrics.get("group_by"), list):
        module = "sciml.uq.hurdle_groups" if "test_coverage_zero" in metrics else "sciml.uq.conditional"
        limits.append(f"- Conditional calibration on the groups {', '.join(metrics['group_by'])} (quantile regression "
                      f"on group indicators, `{module}`): every group with enough calibration structures "
                      "is covered at the nominal level, not only the average.")
    elif metrics.get("group_by"):
        limits.append(f"- Mondrian calibration by `{metrics['group_by']}`: the coverage guarantee holds within each "
                      "group, not only on average.")
    if domain is not None:
        limits += domain_lines(domain, "fitted at export")
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
    calibrator = domain = None
    if calibrate and module.zero_inflated:
        cal, zero_metrics = calibrate_hurdle(module, dm, alpha, cfg.get("calibration"))
        metrics |= zero_metrics
        calibrator = cal.to_dict()
    elif calibrate:
        calibration = resolve_group_by(cfg.get("calibration"), [s for b in dm.calib_dataloader()
                                                                for s in graph_structures(b)])
        cal = build_calibrator(calibration, score, alpha)  # split, or mondrian with group_by (cell_size: bins)
        cal_mean, cal_sigma, cal_y = (t.double() for t in collect_predictions(module, dm.calib_dataloader()))
        fit_calibrator(cal, cal_mean, cal_y, cal_sigma, loader_structures(cal, dm.calib_dataloader(), graph_structures))
        interval = predict_interval(cal, mean.double(), sigma.double(), alpha,
                                    loader_structures(cal, dm.test_dataloader(), graph_structures))
        metrics |= {"test_coverage": float(coverage(interval, y.double())),
                    "test_width": float(mean_width(interval)), "alpha": alpha,
                    "n_calib": int(cal.scores.numel())}
        if getattr(cal, "group_by", None) is not None:
            metrics["group_by"] = cal.group_by
        calibrator = cal.to_dict()
    if calibrate:
        n_cal = dm.split_sizes()["calib"]
        if (n_cal + 1) * DOMAIN_BETA >= 1:
            domain = fit_domain(module, dm, cal, beta=DOMAIN_BETA, seed=int(cfg.get("seed", 0)))
        else:  # the domain test could never flag at β: say so instead of shipping a test that cannot fail
            metrics["domain"] = (f"not fitted: {n_cal} calibration structures, the domain test at beta={DOMAIN_BETA} "
                                 f"needs at least {math.ceil(1 / DOMAIN_BETA) - 1}")
    art_cfg = {"task": "crystal", "module": hparams, "data": cfg["data"]}
    target_keys = ("name", "unit", "extensive", "zero_inflated", "zero_label")
    metadata = {"task": "crystal", "target": {k: hparams["target"][k] for k in target_keys if k in hparams["target"]},
                "elements": hparams["elements"], "graph": hparams["graph"], "split_sizes": dm.split_sizes(),
                "metrics": metrics, "source_checkpoint": ckpt.name}
    if domain is not None:
        metadata["domain"] = domain_summary(domain)
    card = model_card(Path(output).name, art_cfg, metrics, dm.split_sizes(), alpha, domain)
    save_artifact(output, config=art_cfg, state_dict=module.state_dict(), metadata=metadata,
                  calibrator=calibrator, card=card, extras={DOMAIN_FILE: domain.to_dict()} if domain else None)
    return metrics


@torch.no_grad()
def collect_parts(module: CrystalRegressor, loader) -> tuple[torch.Tensor, ...]:
    """``(p₀, y₊, y)`` over ``loader`` for a zero-inflated model, each ``(n,)`` float64."""
    module.eval()
    out = []
    for batch in loader:
        pred = module.predict_step(batch)
        out.append((pred.meta["p_zero"], pred.meta["positive"], batch[keys.TARGET]))
    return tuple(torch.cat(parts).double() for parts in zip(*out, strict=True))


def calibrate_hurdle(module: CrystalRegressor, dm, alpha: float, calibration: dict | None = None
                     ) -> tuple[HurdleConformal, dict]:
    """Class-wise (and, with ``method: conditional``, per-group) conformal calibration of a zero-inflated model.

    :mod:`sciml.uq.hurdle`, :mod:`sciml.uq.hurdle_groups`. Metrics: coverage and mean width overall, among zeros
    and among positives; ROC-AUC of ``p₀`` for ``y = 0``; MAE overall and among positives.
    """
    cal = build_hurdle(calibration, alpha)
    structures = {split: loader_structures(cal, getattr(dm, f"{split}_dataloader")(), graph_structures)
                  for split in ("calib", "test")}
    cal.fit(*collect_parts(module, dm.calib_dataloader()), **hurdle_members(cal, structures["calib"], fitting=True))
    p_zero, value, y = collect_parts(module, dm.test_dataloader())
    groups = hurdle_members(cal, structures["test"])
    sets, mean = cal.predict_set(p_zero, value, alpha, **groups), cal.point(p_zero, value, alpha, **groups)
    zero, covered = y <= 0, sets.contains(y)
    width, unbounded = bounded_width(sets)
    metrics = {"test_mae": float((mean - y).abs().mean()), "test_mae_positive": float((mean - y)[~zero].abs().mean()),
               "test_coverage": float(covered.double().mean()), "test_width": width, "test_unbounded": unbounded,
               "alpha": alpha, "n_calib": cal.n_calib, "test_roc_auc_zero": roc_auc(p_zero, zero),
               "test_coverage_zero": float(covered[zero].double().mean()),
               "test_coverage_positive": float(covered[~zero].double().mean())}
    if getattr(cal, "group_by", None):
        metrics["group_by"] = cal.group_by
    else:  # one pair of thresholds for every input
        t, q = cal.thresholds(alpha)
        metrics |= {"zero_threshold": float(t), "half_width": float(q)}
    return cal, metrics


def roc_auc(score, positive) -> float:
    """Area under the ROC curve of ``score`` ``(n,)`` for bool labels ``positive`` ``(n,)`` (ties count one half).

    Mann–Whitney form; NaN when one class is empty. Tensors or arrays.
    """
    from scipy.stats import rankdata

    score, positive = np.asarray(score), np.asarray(positive, dtype=bool)
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        return nan
    return float((rankdata(score)[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def domain_summary(domain: CrystalDomain) -> dict:
    """What ``metadata.json`` records about ``domain.json``."""
    d = domain.score
    return {"file": DOMAIN_FILE, "method": d.method, "layer": domain.layer, "k": d.k, "beta": d.beta,
            "n_reference": int(d.reference.shape[0]), "n_train": d.n_train, "n_calib": d.n_calib,
            "n_shift": len(domain.shift_scores), "seed": domain.seed}
