"""Which prior mean for unseen doubles: the masking prior against the shrunk combination rule, without training.

With ``remainder_mean: 0`` and ``exact_mean`` the flow model's generated mean is its prior mean (control mean +
prior, clipped at 0), so the prior decides the headline MSE and can be compared without training a network.

Per simulator case (``configs/data/grn_<setting>.yaml`` with the seed as data and split seed, the split of
``configs/perturbation/grn_default.yaml``):

* ``design``: nested evaluation on data that is not test. Outer folds: five folds of the training doubles, then
  val. Each design is fitted on the training doubles outside the fold only, its own choices included, and scored
  on the fold: **masking** (:func:`sciml.perturbation.nn.masking.masking_prior`, ``κ`` and ``τ`` chosen on the
  inner doubles) and **combination** (:class:`sciml.perturbation.nn.combination.CombinationRule` fitted on the
  inner doubles, ``λ`` chosen by inner five-fold cross-fitting). Reported: the MSE of each over all scored doubles,
  divided by the additive baseline's (unclipped, as in ``benchmarks/perturbation.py``).
* ``test`` (a diagnosis; nothing is chosen on it): both priors as the package builds them
  (:func:`sciml.perturbation.task.build`, choices on training + val) on the test doubles, same ratio.

Usage::

    python benchmarks/perturbation_prior.py [--settings default cooperative noisy] [--seeds 0 1 2]
        [--work DIR] [--output benchmarks/results/perturbation_prior.json]
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import numpy as np
import torch

from sciml.cli.config import load_config
from sciml.core.io.atomic import atomic_write_text
from sciml.perturbation.data.anndata_io import write_h5ad
from sciml.perturbation.nn.combination import CombinationRule
from sciml.perturbation.nn.masking import masking_prior
from sciml.perturbation.select import DENOISE_GRID, KAPPA_GRID, SHRINK_GRID
from sciml.perturbation.sim.simulate import simulate
from sciml.perturbation.task import build

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = ("default", "cooperative", "noisy")
FOLDS = 5


def case_config(setting: str, seed: int, work: Path, prior: str) -> dict:
    """The flow recipe on the simulated screen of ``setting``/``seed`` with ``prior`` (``masking``/``combination``)."""
    path = work / f"grn_{setting}_seed{seed}.h5ad"
    if not path.exists():
        data_cfg = load_config(ROOT / "configs" / "data" / f"grn_{setting}.yaml")["grn"]
        write_h5ad(simulate(data_cfg | {"seed": seed}), path)
    cfg = copy.deepcopy(load_config(ROOT / "configs" / "perturbation" / "grn_default.yaml")) | {"seed": seed}
    cfg["data"] |= {"path": str(path), "split": cfg["data"]["split"] | {"seed": seed}}
    if prior == "combination":
        cfg["model"]["flow"] |= {"prior": "combination", "shrink": "auto"}
    return cfg


def doubles(dm, model, split: str) -> dict:
    """Arrays of the split's doubles of known singles: ``a``, ``b`` (D,), ``mu0``, ``target``, ``own`` (D, G)."""
    keys = [k for k in dm.conditions[split]
            if len(dm.perturbation(k)) == 2 and all(bool(model.has_effect[i]) for i in dm.encode(k))]
    pert = torch.tensor([dm.encode(k) for k in keys]).reshape(-1, 2)
    return {"keys": keys, "a": pert[:, 0], "b": pert[:, 1], "pert": pert,
            "mu0": torch.as_tensor(np.stack([dm.control_matrix(k).mean(0) for k in keys]), dtype=torch.float32),
            "target": torch.as_tensor(np.stack([dm.cells(k).mean(0) for k in keys]), dtype=torch.float32),
            "own": model._own_columns(pert, None, model.single_effect.shape[1])}


def take(rows: dict, idx: np.ndarray) -> dict:
    """Rows ``idx`` of :func:`doubles`."""
    return {k: ([v[i] for i in idx] if isinstance(v, list) else v[torch.as_tensor(idx, dtype=torch.long)])
            for k, v in rows.items()}


def join(parts: list[dict]) -> dict:
    """Concatenate :func:`doubles` row sets."""
    return {k: (sum((p[k] for p in parts), []) if k == "keys" else torch.cat([p[k] for p in parts]))
            for k in parts[0]}


def sq_error(effect: torch.Tensor, rows: dict, clip: bool = True) -> torch.Tensor:
    """Per-double MSE ``(D,)`` of ``mu0 + effect`` (clipped at 0) against the observed mean; own columns additive."""
    pred = rows["mu0"] + effect
    return ((pred.clamp_min(0.0) if clip else pred) - rows["target"]).pow(2).mean(-1)


class Arrays:
    """Single effects ``S``, their squared standard errors ``V`` and the ``(a, b)`` additive sum of row sets."""

    def __init__(self, model) -> None:
        self.s, self.v = model.single_effect, model.single_var

    def additive(self, rows: dict) -> torch.Tensor:
        return self.s[rows["a"]] + self.s[rows["b"]]

    def masking(self, rows: dict, kappa: float, tau: float) -> torch.Tensor:
        a, b = rows["a"], rows["b"]
        rule = masking_prior(self.s[a], self.s[b], self.v[a], self.v[b], kappa, tau)
        return torch.where(rows["own"], self.additive(rows), rule)

    def fit_masking(self, rows: dict) -> tuple[float, float]:
        scores = {(k, t): float(sq_error(self.masking(rows, k, t), rows).mean()) for k in KAPPA_GRID
                  for t in DENOISE_GRID}
        return min(scores, key=lambda x: (round(scores[x], 12), x))

    def combination(self, rows: dict, rule: CombinationRule, lam: float) -> torch.Tensor:
        add = self.additive(rows)
        with torch.no_grad():
            pred = rule(self.s[rows["a"]], self.s[rows["b"]], rows["mu0"][0])
        return torch.where(rows["own"], add, add + lam * (pred - add))

    def fit_rule(self, rows: dict, seed: int) -> CombinationRule:
        rule = CombinationRule()
        rule.fit(self.s[rows["a"]], self.s[rows["b"]], rows["mu0"][0], rows["target"] - rows["mu0"], seed=seed)
        return rule.requires_grad_(False)

    def fit_combination(self, rows: dict, seed: int) -> tuple[CombinationRule, float]:
        held, scored = [], []
        for fold in folds(len(rows["keys"]), seed):
            inner = self.fit_rule(take(rows, np.setdiff1d(np.arange(len(rows["keys"])), fold)), seed)
            held.append(take(rows, fold))
            scored.append(inner)
        scores = {lam: float(torch.cat([sq_error(self.combination(h, r, lam), h) for h, r in zip(held, scored,
                                                                                                  strict=True)]).mean())
                  for lam in SHRINK_GRID}
        return self.fit_rule(rows, seed), min(scores, key=lambda x: (round(scores[x], 12), x))


def folds(n: int, seed: int) -> list[np.ndarray]:
    """``FOLDS`` disjoint index sets covering ``range(n)`` (seeded permutation)."""
    order = np.random.default_rng(seed).permutation(n)
    return [np.sort(order[k::FOLDS]) for k in range(min(FOLDS, n))]


def design(arrays: Arrays, train: dict, val: dict, seed: int) -> dict:
    """Nested comparison on the training folds and val (module docstring): MSE ratios to additive."""
    n = len(train["keys"])
    outer = [(np.setdiff1d(np.arange(n), f), take(train, f)) for f in folds(n, seed + 100)]
    outer.append((np.arange(n), val))
    err = {"additive": [], "masking": [], "combination": []}
    chosen = []
    for inner_idx, held in outer:
        inner = take(train, inner_idx)
        kappa, tau = arrays.fit_masking(inner)
        rule, lam = arrays.fit_combination(inner, seed)
        chosen.append({"kappa": kappa, "denoise": tau, "shrink": lam})
        err["additive"].append(sq_error(arrays.additive(held), held, clip=False))
        err["masking"].append(sq_error(arrays.masking(held, kappa, tau), held))
        err["combination"].append(sq_error(arrays.combination(held, rule, lam), held))
    mse = {k: float(torch.cat(v).mean()) for k, v in err.items()}
    return {"n_scored": sum(len(h["keys"]) for _, h in outer), "mse": mse, "chosen_per_fold": chosen,
            "ratio": {k: mse[k] / mse["additive"] for k in ("masking", "combination")}}


def test_diagnosis(setting: str, seed: int, work: Path) -> dict:
    """Both priors as :func:`sciml.perturbation.task.build` makes them, on the test doubles (ratio to additive)."""
    out = {}
    for prior in ("masking", "combination"):
        dm, model = build(case_config(setting, seed, work, prior), None)
        rows = doubles(dm, model, "test")
        with torch.no_grad():
            effect = model.prior_mean(rows["pert"])
        add = float(sq_error(model.single_effect[rows["a"]] + model.single_effect[rows["b"]], rows, False).mean())
        out[prior] = {"ratio": float(sq_error(effect, rows).mean()) / add,
                      "chosen": {k: model.flow[k] for k in ("kappa", "denoise", "shrink")}}
    return out


def run(setting: str, seed: int, work: Path) -> dict:
    """Design comparison and test diagnosis of one case."""
    dm, model = build(case_config(setting, seed, work, "masking"), None)
    arrays = Arrays(model)
    result = design(arrays, doubles(dm, model, "train"), doubles(dm, model, "val"), seed)
    return {"setting": setting, "seed": seed, "design": result, "test": test_diagnosis(setting, seed, work)}


def main(argv: list[str] | None = None) -> int:
    """Run every case and write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--work", default="benchmarks/runs/perturbation")
    p.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "perturbation_prior.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for setting in args.settings:
        for seed in args.seeds:
            rows.append(run(setting, seed, work))
            d, t = rows[-1]["design"]["ratio"], rows[-1]["test"]
            print(f"{setting} seed {seed}: design (train folds + val) masking {d['masking']:.3f} combination "
                  f"{d['combination']:.3f} | test masking {t['masking']['ratio']:.3f} combination "
                  f"{t['combination']['ratio']:.3f} (x additive)", flush=True)
    summary = {k: float(np.mean([r["design"]["ratio"][k] for r in rows])) for k in ("masking", "combination")}
    summary |= {f"test_{k}": float(np.mean([r["test"][k]["ratio"] for r in rows])) for k in ("masking", "combination")}
    print(f"mean: {summary}")
    atomic_write_text(args.output, json.dumps({"summary_mean_ratio": summary, "cases": rows}, indent=1,
                                              default=float))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
