"""Generate perturbed cells from control cells, and mean effects with conformal bands.

Control pairing at predict time (stated in the output's ``uns``): for each condition, ``n_cells`` control cells
are drawn from the given control population (without replacement when there are enough, seeded), and each
generated cell is the ODE solution started from (noise, or) its control cell. The mean effect is
``Δ̂ = mean(generated) − mean(all given control cells)``.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from tqdm.auto import tqdm

from sciml.core.threads import torch_threads
from sciml.perturbation.artifact import PerturbationPredictor
from sciml.perturbation.domain import out_of_domain_note, rule_reasons
from sciml.perturbation.model import PerturbationModel

MAX_CELLS_PER_CALL = 512  # cells integrated together (bounds memory: cells × genes × width per attention map)


def parse_perturbations(text: str) -> list[str]:
    """Split ``"A+B,C"`` into labels ``["A+B", "C"]``; ``ValueError`` when empty."""
    labels = [t.strip() for t in str(text).split(",") if t.strip()]
    if not labels:
        raise ValueError("--perturbations is empty; pass labels such as 'A+B,C'")
    return labels


def draw_controls(ctrl: np.ndarray, n_cells: int, rng: np.random.Generator) -> np.ndarray:
    """``n_cells`` rows of ``ctrl`` (without replacement when ``n_cells <= len(ctrl)``)."""
    return ctrl[rng.choice(len(ctrl), n_cells, replace=n_cells > len(ctrl))]


@torch.no_grad()
def generate(module: PerturbationModel, ctrl: np.ndarray, rows: list[list[int]], n_cells: int, seed: int = 0,
             steps: int | None = None, method: str | None = None, progress: bool = False) -> np.ndarray:
    """Generated cells ``(C, n_cells, G)`` float32 for ``rows`` (``pert_genes`` rows) from control cells ``(n, G)``.

    Conditions are integrated in groups of at most :data:`MAX_CELLS_PER_CALL` cells; each condition's noise and
    control draws come from ``(seed, its position)``, so results do not depend on the other conditions. With
    ``torch.get_num_threads() = T > 1`` the groups after the first run on ``T`` threads of one torch thread each
    (the many small operations of a condition parallelise poorly inside an operation; the same cells, ~1.6×
    faster on 2 cores). A model under ``flow.additive_fallback`` generates cells whose mean is exactly
    ``mean(ctrl) + additive effect`` (clipped at 0), the additive baseline's prediction
    (:meth:`PerturbationModel.sample`). With ``progress`` a bar on stderr counts conditions (drawn on a terminal
    only).
    """
    module.eval()
    device = next(module.parameters()).device
    out = np.empty((len(rows), n_cells, ctrl.shape[1]), np.float32)
    ctrl_mean = torch.as_tensor(ctrl.mean(0), dtype=torch.float32, device=device)  # additive fallback's base
    per_call = max(1, MAX_CELLS_PER_CALL // n_cells)
    groups = [range(s, min(s + per_call, len(rows))) for s in range(0, len(rows), per_call)]
    bar = tqdm(total=len(rows), desc="generate", unit="condition", file=sys.stderr,
               disable=None if progress else True)

    @torch.no_grad()  # grad mode is per thread
    def run(idx: range) -> range:
        x_ctrl = torch.as_tensor(np.stack([draw_controls(ctrl, n_cells, np.random.default_rng([seed, i]))
                                           for i in idx]), dtype=torch.float32, device=device)
        x0 = torch.cat([module.path.initial(x_ctrl[j:j + 1], torch.Generator().manual_seed(seed * 1_000_003 + i))
                        for j, i in enumerate(idx)])
        cells = module.sample(x_ctrl, torch.as_tensor([rows[i] for i in idx], dtype=torch.long, device=device),
                              steps, method, x0=x0, ctrl_mean=ctrl_mean)
        out[idx.start:idx.stop] = cells.cpu().numpy()
        return idx

    for idx in map(run, groups[:1]):  # the first group fills the model's caches (prior tables, shrunk singles)
        bar.update(len(idx))
    workers = torch.get_num_threads() if device.type == "cpu" else 1
    with torch_threads(1), ThreadPoolExecutor(workers) as pool:
        for idx in pool.map(run, groups[1:]):
            bar.update(len(idx))
    bar.close()
    return out


def predict_effects(predictor: PerturbationPredictor, ctrl: np.ndarray, labels: list[str], n_cells: int = 200,
                    seed: int = 0, alpha: float | None = None, steps: int | None = None,
                    method: str | None = None, progress: bool = False, beta: float | None = None) -> dict:
    """Cells and mean effects with bands for condition ``labels`` given control cells ``ctrl`` ``(n, G)``.

    Returns
    -------
    dict
        ``conditions`` (canonical labels), ``notes``, ``cells`` ``(C, n_cells, G)``, ``effect`` ``(C, G)``,
        ``lower``/``upper`` ``(C, G)`` (NaN without a calibrator; ±inf when the calibration conditions are too
        few for ``alpha``), ``alpha``, ``threshold``, ``n_calib`` (calibration conditions; 0 without a calibrator),
        and the applicability domain (:mod:`sciml.perturbation.domain`): ``domain_pvalue`` ``(C,)`` (the control
        population's batch p-value; NaN without ``domain.json`` and for a condition beyond the training
        perturbations, whose note says why), ``in_domain`` ``(C,)`` bool (``False`` when
        ``p <= beta`` or the perturbation extrapolates; without ``domain.json`` only the rules are applied, from
        the training conditions recorded in ``metadata.json``), ``beta``. A flagged condition's note says in one
        line that its band carries no guarantee.

    """
    encoded = [predictor.encode(label) for label in labels]
    cells = generate(predictor.module, ctrl, [row for _, row, _ in encoded], n_cells, seed, steps, method, progress)
    effect = cells.mean(1) - ctrl.mean(0)
    lower = upper = np.full_like(effect, np.nan)
    threshold, n_calib = float("nan"), 0
    if predictor.bands is not None:
        n_calib = predictor.bands.calibrator.n_calib
        alpha = predictor.bands.alpha if alpha is None else alpha
        box = predictor.bands.predict_set(torch.as_tensor(effect), alpha)
        lower, upper = box.lower.numpy(), box.upper.numpy()
        threshold = predictor.bands.threshold(alpha)
    conditions = [c for c, _, _ in encoded]
    domain = assess_domain(predictor, conditions, ctrl, beta)
    notes = [d or n for (_, _, n), d in zip(encoded, domain.pop("note"), strict=True)]  # the domain note subsumes
    return {"conditions": conditions, "notes": notes, "cells": cells, "effect": effect, "lower": lower,
            "upper": upper, "alpha": alpha, "threshold": threshold, "n_calib": n_calib, **domain}


def assess_domain(predictor: PerturbationPredictor, conditions: list[str], ctrl: np.ndarray,
                  beta: float | None = None) -> dict:
    """``domain_pvalue``, ``in_domain``, ``note`` per condition and ``beta`` (see :func:`predict_effects`)."""
    if predictor.domain is not None:
        beta = predictor.domain.beta if beta is None else beta
        out = predictor.domain.assess(conditions, ctrl, beta)
    else:  # rules only, from the training conditions recorded in metadata.json (none recorded: nothing known)
        train = predictor.data.get("conditions", {}).get("train") or []
        label = predictor.data.get("control_label", "ctrl")
        reasons = [rule_reasons(c, train, label) if train else [] for c in conditions]
        out = {"domain_pvalue": [float("nan")] * len(conditions), "in_domain": [not r for r in reasons],
               "note": [out_of_domain_note(r) for r in reasons]}
        beta = float("nan")
    return {"domain_pvalue": np.asarray(out["domain_pvalue"], np.float64),
            "in_domain": np.asarray(out["in_domain"], bool), "note": out["note"], "beta": float(beta)}
