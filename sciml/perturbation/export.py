"""Export a perturbation checkpoint to an artifact (docs/design.md §4) with conformal effect bands and a model card."""

from __future__ import annotations

from pathlib import Path

from sciml.core.io import card
from sciml.core.io.artifact import save_artifact
from sciml.perturbation.evaluate import band_metrics, effects, split_predictions
from sciml.perturbation.module import PerturbationFlow
from sciml.perturbation.select import apply_fallback, versus_additive
from sciml.perturbation.uncertainty import EffectBands

HEADLINE = ("pearson_delta", "pearson_delta_de", "mse", "mae", "energy", "mmd", "discrimination")


def model_card(name: str, cfg: dict, data: dict, metrics: dict, alpha: float, check: dict | None = None) -> str:
    """Markdown model card (:func:`sciml.core.io.card.model_card`) filled with the perturbation sections.

    ``check``: :func:`sciml.perturbation.select.versus_additive` on val (stated, with the fallback it decided).
    """
    sizes = {k: len(v) for k, v in data["conditions"].items()}
    flow = cfg["module"].get("flow") or {}
    summary = ("Conditional flow-matching model (PAD-Transformer backbone) of single-cell perturbation response: "
               "generates perturbed cells from control cells for single and double gene perturbations over "
               f"{len(cfg['module']['genes'])} genes (log1p expression). Mean prior of a double: "
               f"{flow.get('prior', 'additive')} (`flow.prior`, weight over additive `flow.shrink` = "
               f"{flow.get('shrink', 1.0)}). Generated values are projected onto x ≥ 0 (log1p of counts).")
    if check is not None:
        verdict = (f"on the {check['n_val']} val conditions the model's mean MSE is {check['flow_mse']:.4g} against "
                   f"{check['additive_mse']:.4g} for the additive baseline" if check["n_val"] else "val is empty")
        if flow.get("additive_fallback"):
            summary += (f"\n\n**This model does not beat the additive baseline on val** ({verdict}): it predicts "
                        "with the additive prior (`flow.additive_fallback: true`; the generated mean effect is the sum "
                        "of the measured single effects, the network only shapes the cells around it).")
        else:
            summary += f"\n\nBetter than the additive baseline on val: {verdict}."
    sources = [f"- source: `{cfg['data']['path']}` (sha256 `{data['data_sha256'][:16]}…`)",
               f"- split `{data['split']['kind']}` (seed {data['split']['seed']}): conditions per split {sizes}"]
    measured = [f"- {k}: {metrics[k]:.4f}" for k in HEADLINE if k in metrics]
    if "coverage_simultaneous" in metrics:
        cover = metrics["coverage_simultaneous"]
        measured += [f"- {100 * (1 - alpha):.0f}% simultaneous effect bands: coverage {cover:.3f} "
                     f"(per gene {metrics['coverage_per_gene']:.3f}) over {metrics['n_test']} test conditions, "
                     f"{metrics['n_calib']} calibration conditions, mean half-width {metrics['mean_half_width']:.4f}"]
    limits = [f"- Genes perturbed in training: {len(cfg['module'].get('perturbed_genes') or [])}; a measured gene "
              "never perturbed in training is embedded through the gene graph only (flagged; extrapolation).",
              "- Bands are split-conformal over conditions: they cover the whole effect vector of a new condition "
              "with probability ≥ 1−α when it is exchangeable with the calibration conditions (same split "
              "category, same data distribution); no guarantee for other cell types or screens.",
              "- Input control cells must be log1p-normalised like the training data "
              f"({data.get('expression', 'log1p')})."]
    return card.model_card(name, summary, data=sources, metrics=measured, limits=limits,
                           metrics_title="Metrics on the test conditions (mean over conditions)")


def export(ckpt: str | Path, state: dict, output: str | Path, cfg: dict, calibrate: bool = True,
           alpha: float = 0.1, score: str | None = None, n_cells: int = 128, seed: int = 0) -> dict:
    """Export ``ckpt`` (already loaded as ``state``, trained with ``cfg``) to ``output``; return test metrics.

    The effect bands always use the sup-norm score (:class:`~sciml.perturbation.uncertainty.EffectBands`):
    ``score`` may be ``None`` or ``"supnorm"``, anything else is refused rather than ignored.
    """
    from sciml.perturbation.metrics import evaluate
    from sciml.perturbation.task import datamodule

    if score not in (None, "supnorm"):
        raise ValueError(f"score {score!r}: perturbation effect bands use the sup-norm score only; drop the score "
                         "setting or set it to 'supnorm'")
    ckpt = Path(ckpt)
    hparams = dict(state["hyper_parameters"])
    module = PerturbationFlow(**hparams)
    module.load_state_dict(state["state_dict"], strict=True)
    module.eval()
    dm = datamodule(cfg, None)
    check = versus_additive(module, dm, n_cells, seed)
    apply_fallback(module, check)
    hparams = dict(module.hparams)
    test_cells = split_predictions(module, dm, "test", n_cells, seed)
    table = evaluate(test_cells, dm, "test", seed)
    metrics = {k: float(table[k].mean()) for k in HEADLINE if k in table}
    calibrator = None
    if calibrate:
        fit = effects(split_predictions(module, dm, "val", n_cells, seed), dm)
        cal = effects(split_predictions(module, dm, "calib", n_cells, seed), dm)
        bands = EffectBands.fit(*fit, *cal, alpha=alpha)
        metrics |= band_metrics(bands, *effects(test_cells, dm)) | {"alpha": alpha}
        calibrator = bands.to_dict()
    data = dm.to_dict()
    art_cfg = {"task": "perturbation", "module": hparams, "data": cfg["data"]}
    metadata = {"task": "perturbation", "target": {"name": "expression", "unit": "log1p(counts/library·1e4)"},
                "genes": module.measured_genes, "perturbation_genes": list(hparams["genes"]), "data": data,
                "split_sizes": {k: len(v) for k, v in dm.conditions.items()}, "metrics": metrics, "val_check": check,
                "source_checkpoint": ckpt.name}
    save_artifact(output, config=art_cfg, state_dict=module.state_dict(), metadata=metadata, calibrator=calibrator,
                  card=model_card(Path(output).name, art_cfg, data, metrics, alpha, check))
    return metrics
