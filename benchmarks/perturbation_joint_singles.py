"""A lead for issue 14, not in the package: estimate the singles jointly with the training doubles, then shrink.

Every double ``a+b`` also measures its singles: ``Δ_ab = Δ_a + Δ_b + ε_ab + noise``. Per gene ``g``, the singles
``β`` (``S`` of them) are fitted by generalised least squares on the measured singles (variance ``v_a``) and the
training doubles (variance ``v_ab + τ_g²``), where ``τ_g²``, the variance of the interactions on gene ``g``, is
estimated by moments from the doubles' residuals ``Δ_ab − Δ_a − Δ_b`` (``mean(r² − v_ab − v_a − v_b)``, clipped at
0; DerSimonian & Laird 1986): a gene whose doubles interact much lets them count little. The estimates and the
diagonal of their covariance then go through the same per-single shrinkage as the recipe
(:func:`sciml.perturbation.nn.shrinkage.ash_by_row`).

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

from sciml.core.io.atomic import atomic_write_text
from sciml.perturbation.nn.shrinkage import ash_by_row
from sciml.perturbation.select import double_keys, observed
from sciml.perturbation.task import _mean_variance, build

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perturbation import OTHER, SETTINGS  # noqa: E402
from perturbation_prior import case_arguments, case_config, folds  # noqa: E402


def joint_singles(d: torch.Tensor, v: torch.Tensor, pairs: torch.Tensor, dab: torch.Tensor,
                  vab: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """GLS singles ``(S, G)`` and their variances from singles ``d``, ``v`` and doubles ``dab``, ``vab`` ``(P, G)``.

    ``pairs`` ``(P, 2)``: the doubles' single indices (module docstring).
    """
    s, g = d.shape
    a, b = pairs[:, 0], pairs[:, 1]
    tau2 = (dab - d[a] - d[b]).square().sub(vab + v[a] + v[b]).mean(0).clamp_min(0.0) if len(pairs) else 0.0
    design = torch.zeros(s + len(pairs), s, dtype=torch.float64)
    design[:s] = torch.eye(s, dtype=torch.float64)
    rows = torch.arange(len(pairs))
    design[s + rows, a] += 1.0
    design[s + rows, b] += 1.0
    y = torch.cat([d, dab]).double()
    w = 1.0 / torch.cat([v, vab + tau2]).double().clamp_min(1e-12)  # (S + P, G)
    normal = torch.einsum("ng,ns,nt->gst", w, design, design)  # (G, S, S)
    cov = torch.linalg.inv(normal)
    beta = torch.einsum("gst,nt,ng,ng->sg", cov, design, w, y)
    return beta.float(), torch.diagonal(cov, dim1=-2, dim2=-1).T.float()


def _observed(dm, keys: list[str], index: dict) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """:func:`observed` of ``keys``, their pairs as rows of the known singles, and the doubles' squared s.e."""
    obs = observed(dm, keys)
    pairs = torch.tensor([[index[int(a)], index[int(b)]] for a, b in obs["pert"]], dtype=torch.long).reshape(-1, 2)
    var = [_mean_variance(dm.cells(k)) + _mean_variance(dm.control_matrix(k)) for k in keys]  # as for the singles
    return obs, pairs, torch.as_tensor(np.stack(var), dtype=torch.float32)


def run(setting: str, seed: int, work: Path) -> dict:
    """Design (training folds + val) and test ratios of both singles for one simulator case."""
    dm, model = build(case_config(setting, seed, work, "masking"), None)
    known = torch.nonzero(model.has_effect).flatten()
    index = {int(i): j for j, i in enumerate(known)}
    d, v = model.single_effect[known], model.single_var[known]
    shrunk = ash_by_row(d, v)
    train, val, test = (double_keys(model, dm, s) for s in ("train", "val", "test"))
    outer = [([train[i] for i in range(len(train)) if i not in set(f)], [train[i] for i in f])
             for f in folds(len(train), seed + 100)] + [(train, val)]
    out = {}
    for name, splits in (("design", outer), ("test", [(train + val, test)])):
        err = {"additive": [], "single": [], "joint": []}
        for inner, held in splits:
            obs_in, pairs_in, var_in = _observed(dm, inner, index)
            beta, var = joint_singles(d, v, pairs_in, obs_in["target"] - obs_in["mu0"], var_in)
            obs, pairs, _ = _observed(dm, held, index)

            def mse(table: torch.Tensor, clip: bool = True, obs=obs, pairs=pairs) -> torch.Tensor:
                pred = obs["mu0"] + table[pairs[:, 0]] + table[pairs[:, 1]]
                return ((pred.clamp_min(0.0) if clip else pred) - obs["target"]).square().mean(-1)

            err["additive"].append(mse(d, clip=False))
            err["single"].append(mse(shrunk))
            err["joint"].append(mse(ash_by_row(beta, var)))
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
    atomic_write_text(args.output, json.dumps({"summary": summary, "cases": rows}, indent=1, default=float))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
