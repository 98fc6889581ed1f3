"""Perturbation section of ``benchmarks/results/domain.json``: the shipped model's control-cell domain test.

In-distribution: fresh control cells of the training screen's network (``configs/data/grn_default.yaml``, same GRN,
new cell draws). Shifted: control cells of other simulator settings over the same 100 gene names: the cooperative
screen (``grn_cooperative.yaml``), the noisy screen's technical noise (``grn_noisy.yaml`` at 100 genes) and the
default settings with another network seed. Per setting: the per-cell flag rate, the flag rate of batches of
``BATCH`` cells (the rule ``predict`` applies, 2 × median p), and the AUROC of the per-cell nonconformity score
for "from the shifted set".

Bands (``band_check``): on each of the same four screens, the model's held-out conditions (val + test: never
trained on, never calibrated on) are simulated with their measured cells, and ``predict_effects`` (what
``perturbation predict`` runs; 128 generated cells per condition, as at calibration) is given the screen's control
cells. Per condition: the domain p-value (the control population's batch p-value; none for a condition that
extrapolates, counted as 0 in the AUROC), ``in_domain`` (the p-value and the extrapolation rules) and whether the
measured effect (mean of the condition's cells minus the control mean, as in calibration) leaves the simultaneous
band. Pooled over the screens: the AUROC of ``1 − p`` for "true effect outside the band", and the band coverage of
in-domain conditions beside that of every condition (the unflagged baseline). Writes only the ``perturbation``
key (read-modify-write keeps the others)::

    OMP_NUM_THREADS=1 python benchmarks/domain_perturbation.py   # or: python benchmarks/domain.py --family perturbation
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
BATCH, N_BATCHES = 100, 10
BAND_CELLS = 128  # cells generated per condition: as in the bands' calibration at export (sciml.perturbation.export)


def controls(cfg: dict, seed_cells: int, n: int) -> np.ndarray:
    """``n`` log1p control cells of setting ``cfg`` (network from ``cfg['seed']``, cells from ``seed_cells``)."""
    from sciml.perturbation.sim.grn import random_grn
    from sciml.perturbation.sim.simulate import SimConfig, log_normalise, simulate_conditions

    c = SimConfig.from_dict({**cfg, "control_cells": n})
    rng = np.random.default_rng(c.seed)
    grn = random_grn(c.n_genes, c.n_masters, c.n_regulators, c.and_share, rng, level=c.level, hill=c.hill,
                     or_share=c.or_share)
    return log_normalise(simulate_conditions(grn, [()], c, np.random.default_rng([c.seed, seed_cells]))["counts"],
                         c.target_sum)


def auroc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(score of a shifted cell > score of an in-distribution cell), ties count one half."""
    s = torch.cat([torch.as_tensor(neg), torch.as_tensor(pos)]).double()
    ranks = torch.empty_like(s)
    order = s.argsort()
    ranks[order] = torch.arange(1, len(s) + 1, dtype=torch.float64)
    for v in s.unique():  # average ranks of ties
        ranks[s == v] = ranks[s == v].mean()
    n_p, n_n = len(pos), len(neg)
    return float((ranks[n_n:].sum() - n_p * (n_p + 1) / 2) / (n_p * n_n))


def screen(cfg: dict, seed_cells: int, labels: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Control cells ``(n_ctrl, G)`` and measured mean effects ``(C, G)`` of conditions ``labels`` under ``cfg``."""
    from sciml.perturbation.sim.grn import random_grn
    from sciml.perturbation.sim.simulate import SimConfig, log_normalise, simulate_conditions

    c = SimConfig.from_dict(cfg)
    grn = random_grn(c.n_genes, c.n_masters, c.n_regulators, c.and_share, np.random.default_rng(c.seed),
                     level=c.level, hill=c.hill, or_share=c.or_share)
    conds = [()] + [tuple(int(g[1:]) for g in label.split("+") if g != "ctrl") for label in labels]
    sim = simulate_conditions(grn, conds, c, np.random.default_rng([c.seed, seed_cells]))
    x = log_normalise(sim["counts"], c.target_sum)
    ctrl = x[sim["cond"] == 0]
    return ctrl, np.stack([x[sim["cond"] == i].mean(0) - ctrl.mean(0) for i in range(1, len(conds))])


def band_check(predictor, settings: dict) -> dict:
    """Band misses against the domain p-value, pooled over ``settings`` (module docstring)."""
    from sciml.perturbation.predict import predict_effects

    labels = predictor.data["conditions"]["val"] + predictor.data["conditions"]["test"]
    rows, per_screen = [], {}
    for i, (name, cfg) in enumerate(settings.items()):
        ctrl, true = screen(cfg, 2000 + i, labels)
        res = predict_effects(predictor, ctrl.astype(np.float32), labels, BAND_CELLS, seed=0)
        miss = ~((res["lower"] <= true) & (true <= res["upper"])).all(-1)
        for j, label in enumerate(res["conditions"]):
            p = float(res["domain_pvalue"][j])  # NaN: the condition extrapolates (a rule), no p-value
            rows.append({"screen": name, "condition": label, "domain_pvalue": None if p != p else round(p, 4),
                         "in_domain": bool(res["in_domain"][j]), "outside_band": bool(miss[j])})
        inside = res["in_domain"]
        per_screen[name] = {"n": len(labels), "flagged": int((~inside).sum()),
                            "band_coverage_all": float(1 - miss.mean()),
                            "band_coverage_in_domain": float(1 - miss[inside].mean()) if inside.any() else None}
    miss = np.array([r["outside_band"] for r in rows])
    score = 1 - np.array([0.0 if r["domain_pvalue"] is None else r["domain_pvalue"] for r in rows])
    flagged = ~np.array([r["in_domain"] for r in rows])
    both = 0 < miss.sum() < len(miss)
    return {"conditions": labels, "alpha": predictor.bands.alpha if predictor.bands is not None else None,
            "generated_cells_per_condition": BAND_CELLS,
            "true_effect": "mean of the condition's simulated cells minus the control mean (log1p)",
            "n_conditions": len(rows), "n_outside_band": int(miss.sum()),
            "auroc_outside_band_vs_1_minus_pvalue": auroc(score[miss], score[~miss]) if both else None,
            "auroc_outside_band_vs_flag": auroc(flagged[miss].astype(float), flagged[~miss].astype(float))
            if both else None,
            "band_coverage_in_domain": float(1 - miss[~flagged].mean()) if (~flagged).any() else None,
            "n_in_domain": int((~flagged).sum()), "band_coverage_all_rows_baseline": float(1 - miss.mean()),
            "per_screen": per_screen, "rows": rows}


def perturbation_section(args=None) -> dict:
    """Flag rates and AUROC of the shipped ``grn-default`` domain test (module docstring)."""
    from sciml.perturbation import load_model

    predictor = load_model()
    dom = predictor.domain
    grn = lambda name: yaml.safe_load((ROOT / "configs" / "data" / name).read_text())["grn"]  # noqa: E731
    base = grn("grn_default.yaml")
    settings = {"in_distribution (grn_default, new cells)": base,
                "grn_cooperative": grn("grn_cooperative.yaml"),
                "grn_noisy (100 genes)": grn("grn_noisy.yaml") | {"n_genes": 100, "n_masters": 10,
                                                                  "n_regulators": 30, "n_singles": 14},
                "grn_default, network seed 1": base | {"seed": 1}}
    out, ref_score = {}, None
    for i, (name, cfg) in enumerate(settings.items()):
        x = controls(cfg, 1000 + i, BATCH * N_BATCHES)
        p = dom.cell_pvalues(x)
        score = dom.score.score(dom.project(x)).numpy()
        batches = [dom.control_pvalue(x[j * BATCH:(j + 1) * BATCH]) for j in range(N_BATCHES)]
        row = {"n_cells": len(x), "cell_flag_rate": float((p <= dom.beta).mean()),
               "batch_flag_rate": float(np.mean(np.array(batches) <= dom.beta)),
               "batch_pvalues": [round(b, 4) for b in batches]}
        if ref_score is None:
            ref_score = score
        else:
            row["auroc_cell_score"] = auroc(score, ref_score)
        out[name] = row
    rules = {label: dom.rule_reasons(label) for label in ("G006+G012", "G001+G040", "G030+ctrl")}
    return {"model": "checkpoints/grn-default", "beta": dom.beta, "batch_cells": BATCH, "n_batches": N_BATCHES,
            "test": "k-NN conformal p-value per control cell (100 PCs of log1p), batch p = min(1, 2 median p)",
            "settings": out, "rules": rules, "bands": band_check(predictor, settings)}


def main() -> int:
    """Compute the section and merge it into ``benchmarks/results/domain.json`` (written once, when complete)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _results import merge_results  # benchmarks/_results.py: complete runs only, atomic

    torch.set_num_threads(1)
    path = ROOT / "benchmarks" / "results" / "domain.json"
    start = time.perf_counter()
    section = perturbation_section() | {"threads": 1, "seconds": round(time.perf_counter() - start, 1)}
    merge_results(path, {"perturbation": section})
    print(json.dumps(section, indent=1))
    print(f"wrote section 'perturbation' of {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
