"""Export a perturbation checkpoint to an artifact (docs/design.md §4) with conformal effect bands and a model card.

Operations on an exported artifact (refit the bands, add the domain test) are in :mod:`sciml.perturbation.calibrate`.
"""

from __future__ import annotations

from pathlib import Path

from sciml.core.io import card
from sciml.core.io.artifact import save_artifact
from sciml.perturbation.domain import FILE as DOMAIN_FILE
from sciml.perturbation.domain import domain_lines, domain_summary, fit_domain
from sciml.perturbation.evaluate import band_metrics, effects, fit_bands, split_predictions
from sciml.perturbation.module import PerturbationFlow
from sciml.perturbation.select import apply_fallback, versus_additive
from sciml.perturbation.settings import PriorSettings

HEADLINE = ("pearson_delta", "pearson_delta_de", "mse", "mae", "energy", "mmd", "discrimination")


def model_card(name: str, cfg: dict, data: dict, metrics: dict, alpha: float, check: dict | None = None) -> str:
    """Markdown model card (:func:`sciml.core.io.card.model_card`) filled with the perturbation sections.

    ``check``: :func:`sciml.perturbation.select.versus_additive` on val (stated, with the fallback it decided).
    """
    sizes = {k: len(v) for k, v in data["conditions"].items()}
    settings = PriorSettings.from_flow(cfg["module"].get("flow"))
    summary = ("Conditional flow-matching model (PAD-Transformer backbone) of single-cell perturbation response: "
               "generates perturbed cells from control cells for single and double gene perturbations over "
               f"{len(cfg['module']['genes'])} genes (log1p expression). Mean prior of a double: "
               f"{_prior_text(settings)}. Generated values are projected onto x ≥ 0 (log1p of counts).")
    if check is not None:
        verdict = (f"on the {check['n_val']} val conditions the model's mean MSE is {check['flow_mse']:.4g} against "
                   f"{check['additive_mse']:.4g} for the additive baseline" if check["n_val"] else "val is empty")
        if check["n_val"] and check["n_val"] < check.get("min_val", 0):
            verdict += (f"; fewer than {check['min_val']} val conditions are not evidence of beating it, so the "
                        "simpler model stands")
        if settings.additive_fallback:
            summary += (f"\n\n**This model does not beat the additive baseline on val** ({verdict}): it predicts "
                        "with the additive prior (`flow.additive_fallback: true`). The generated mean of a condition "
                        "is the additive baseline's: mean of the given control cells + the sum of the measured "
                        "single effects (a single not measured in training: the mean training effect), clipped at "
                        "0; the network only shapes the cells, which are moved to the nearest non-negative "
                        "population with exactly that mean. A single measured in several cell types counts with the "
                        "mean of its effects, which is exactly the baseline's for a cell type it was not measured "
                        "in (cell-type transfer), not for one it was.")
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


def _prior_text(settings: PriorSettings) -> str:
    """One sentence part naming the prior mean of a double and its per-screen choices."""
    if settings.prior == "masking":
        denoise = settings.denoise
        how = {"eb": "by empirical-Bayes shrinkage of all singles under one prior (`flow.denoise: eb`, ash)",
               "eb_single": "by empirical-Bayes shrinkage with one prior per single (`flow.denoise: eb_single`, ash)",
               "eb_joint": "by estimating them jointly with the training doubles (GLS), then empirical-Bayes "
                           "shrinkage with one prior per single (`flow.denoise: eb_joint`, ash)"}
        how = how.get(denoise, f"with τ = {denoise}")
        zero = "κ = 0 adds the shrunk singles" if settings.empirical_bayes else "κ = τ = 0 is additive"
        text = (f"masking (`flow.prior`: singles denoised {how}, the smaller same-sign "
                f"single absorbed with κ = {settings.kappa}, chosen on the training + val doubles; {zero})")
        if settings.closed:
            text += ("; rescaled so that each cell's expected total over the genes is the controls' "
                     "(`flow.closure`: the data are normalised to a fixed total)")
        if settings.blend < 1.0:
            w = settings.blend
            text += (f"; averaged with the combination rule fitted on the training doubles, weights {w:g} and "
                     f"{1 - w:g} (`flow.blend`; the rule's weight over additive `flow.shrink` = "
                     f"{settings.shrink}, chosen on val)")
    elif settings.prior == "combination":
        text = f"combination (`flow.prior`, weight over additive `flow.shrink` = {settings.shrink})"
    else:
        text = "additive (`flow.prior`)"
    if settings.exact_mean:
        text += "; the generated mean of a condition whose singles were all measured is exactly that prior mean"
    return text


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
    apply_fallback(module, check, dm)
    hparams = dict(module.hparams)
    test_cells = split_predictions(module, dm, "test", n_cells, seed)
    table = evaluate(test_cells, dm, "test", seed)
    metrics = {k: float(table[k].mean()) for k in HEADLINE if k in table}
    calibrator = None
    if calibrate:
        bands = fit_bands(module, dm, alpha, n_cells, seed)
        metrics |= band_metrics(bands, *effects(test_cells, dm)) | {"alpha": alpha}
        calibrator = bands.to_dict()
    data = dm.to_dict()
    domain = fit_domain(dm.control_matrix(), dm.conditions["train"], dm.opts["control_label"], seed=seed)
    art_cfg = {"task": "perturbation", "module": hparams, "data": cfg["data"]}
    metadata = {"task": "perturbation", "target": {"name": "expression", "unit": "log1p(counts/library·1e4)"},
                "genes": module.measured_genes, "perturbation_genes": list(hparams["genes"]), "data": data,
                "split_sizes": {k: len(v) for k, v in dm.conditions.items()}, "metrics": metrics, "val_check": check,
                "source_checkpoint": ckpt.name, "domain": domain_summary(domain)}
    card_text = model_card(Path(output).name, art_cfg, data, metrics, alpha, check)
    save_artifact(output, config=art_cfg, state_dict=module.state_dict(), metadata=metadata, calibrator=calibrator,
                  card="\n".join([card_text.rstrip("\n"), *domain_lines(domain, "fitted at export"), ""]),
                  extras={DOMAIN_FILE: domain.to_dict()})
    return metrics
