"""Perturbation section of ``benchmarks/results/domain.json``: the shipped model's control-cell domain test.

In-distribution: fresh control cells of the training screen's network (``configs/data/grn_default.yaml``, same GRN,
new cell draws). Shifted: control cells of other simulator settings over the same 100 gene names: the cooperative
screen (``grn_cooperative.yaml``), the noisy screen's technical noise (``grn_noisy.yaml`` at 100 genes) and the
default settings with another network seed. Per setting: the per-cell flag rate, the flag rate of batches of
``BATCH`` cells (the rule ``predict`` applies, 2 × median p), and the AUROC of the per-cell nonconformity score
for "from the shifted set". Writes only the ``perturbation`` key (read-modify-write keeps the others)::

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


def perturbation_section(args=None) -> dict:
    """Flag rates and AUROC of the shipped ``grn-default`` domain test (module docstring)."""
    from sciml.perturbation import load_model

    dom = load_model().domain
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
            "settings": out, "rules": rules}


def main() -> int:
    """Compute the section and merge it into ``benchmarks/results/domain.json``."""
    from sciml.core.io.atomic import atomic_write_text

    torch.set_num_threads(1)
    path = ROOT / "benchmarks" / "results" / "domain.json"
    start = time.perf_counter()
    section = perturbation_section() | {"threads": 1, "seconds": round(time.perf_counter() - start, 1)}
    results = json.loads(path.read_text()) if path.is_file() else {}
    results["perturbation"] = section
    atomic_write_text(path, json.dumps(results, indent=1))
    print(json.dumps(section, indent=1))
    print(f"wrote section 'perturbation' of {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
