"""The singles estimated jointly with the training doubles (``flow.denoise: eb_joint``) against the measured singles.

Every double ``a+b`` also measures its singles: ``Δ_ab = Δ_a + Δ_b + ε_ab + noise``; the singles are fitted per gene
by generalised least squares on the measured singles and the training doubles, each double weighted by its variance
plus the gene's interaction variance (:mod:`sciml.perturbation.nn.joint`). Both tables then go through the same
per-single shrinkage (:func:`sciml.perturbation.nn.shrinkage.ash_by_row`).

Scored like ``benchmarks/perturbation_prior.py``'s design column, on data that is not test: five folds of the
training doubles, then val; the joint fit uses the training doubles outside the fold only. Reported: the MSE of the
additive prior of the shrunk singles (κ = 0, no blend) divided by the additive baseline's, for the recipe's
singles (``single``: measured singles only) and the joint ones (``joint``), and the same with everything fitted on
training + val and scored on test (a diagnosis). Writes ``benchmarks/results/perturbation_joint_singles.json``::

    OMP_NUM_THREADS=1 python benchmarks/perturbation_joint_singles.py [--settings ...] [--seeds 0 1 2]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

from sciml.perturbation.nn.shrinkage import ash_by_row
from sciml.perturbation.prior import Singles
from sciml.perturbation.screen import double_keys, read_doubles
from sciml.perturbation.select import fit_joint
from sciml.perturbation.task import build

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_json  # noqa: E402  (benchmarks/_results.py: complete runs only, atomic)
from perturbation import OTHER, SETTINGS  # noqa: E402
from perturbation_prior import case_arguments, case_config, folds  # noqa: E402


def run(setting: str, seed: int, work: Path) -> dict:
    """Design (training folds + val) and test ratios of both singles for one simulator case."""
    dm, model = build(case_config(setting, seed, work, "masking"), None)
    model.set_prior(denoise="eb_joint")
    known = model.has_effect
    stored = model.singles()
    singles = Singles(stored.effect.clone(), stored.var.clone(), known.clone(), stored.rows)
    at = stored.rows[known]
    single = stored.effect.clone()
    single[at] = ash_by_row(stored.effect[at], stored.var[at])
    train, val, test = (double_keys(dm, known, s) for s in ("train", "val", "test"))
    outer = [([train[i] for i in range(len(train)) if i not in set(f)], [train[i] for i in f])
             for f in folds(len(train), seed + 100)] + [(train, val)]
    out = {}
    for name, splits in (("design", outer), ("test", [(train + val, test)])):
        err = {"additive": [], "single": [], "joint": []}
        for inner, held in splits:
            model.set_joint_singles(fit_joint(singles, read_doubles(dm, inner)))
            obs = read_doubles(dm, held)

            def mse(table: torch.Tensor, clip: bool = True, obs=obs) -> torch.Tensor:
                pred = obs.mu0 + table[model.rows[obs.pert]].sum(1)
                return ((pred.clamp_min(0.0) if clip else pred) - obs.target).square().mean(-1)

            err["additive"].append(mse(model.single_effect, clip=False))
            err["single"].append(mse(single))
            err["joint"].append(mse(model.shrunk_singles()))
        total = {k: float(torch.cat(e).mean()) for k, e in err.items()}
        out[name] = {k: total[k] / total["additive"] for k in ("single", "joint")}
    return {"setting": setting, "seed": seed, **out}


def main(argv: list[str] | None = None) -> int:
    """Run every case and write the JSON."""
    args, work = case_arguments(argv, __doc__.splitlines()[0], SETTINGS + OTHER, "perturbation_joint_singles.json")
    rows = []
    for setting in args.settings:
        for seed in args.seeds:
            rows.append(run(setting, seed, work))
            r = rows[-1]
            print(f"{setting} seed {seed}: design single {r['design']['single']:.3f} joint {r['design']['joint']:.3f}"
                  f" | test single {r['test']['single']:.3f} joint {r['test']['joint']:.3f} (x additive)", flush=True)
    summary = {f"{part}_{k}": float(np.mean([r[part][k] for r in rows])) for part in ("design", "test")
               for k in ("single", "joint")}
    summary["design_joint_better"] = sum(r["design"]["joint"] < r["design"]["single"] for r in rows)
    summary["cases"] = len(rows)
    print(f"mean: {summary}")
    write_json(args.output, json.loads(json.dumps({"summary": summary, "cases": rows}, default=float)))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
