"""Which prior mean for unseen doubles: the masking prior (with, without closure) against the shrunk rule, no training.

With ``remainder_mean: 0`` and ``exact_mean`` the flow model's generated mean is its prior mean (control mean +
prior, clipped at 0), so the prior decides the headline MSE and can be compared without training a network.

Per simulator case (``configs/data/grn_<setting>.yaml`` with the seed as data and split seed, the split of
``configs/perturbation/grn_default.yaml``):

* ``design``: nested evaluation on data that is not test. Outer folds: five folds of the training doubles, then
  val. Each design is fitted on the training doubles outside the fold only, its own choices included, and scored
  on the fold: **masking** (:func:`sciml.perturbation.nn.masking.masking_prior`, ``κ`` chosen on the inner doubles,
  ``τ`` too unless the recipe fixes an empirical-Bayes ``flow.denoise``, with the recipe's ``flow.closure: auto``),
  **masking_open** (the same without the closure),
  **combination** (:class:`sciml.perturbation.nn.combination.CombinationRule` fitted on the
  inner doubles, ``λ`` chosen by inner five-fold cross-fitting), **blend** (the recipe: ``flow.blend`` times
  masking plus the rest times combination, each part fitted and chosen as alone), **blend_single** (the same
  with ``flow.denoise: eb_single``, the measured singles under one empirical-Bayes prior each, instead of the
  recipe's ``eb_joint``, which first estimates them jointly with the inner training doubles) and **blend_eb** (with
  ``flow.denoise: eb``, one prior for all singles). Reported: the MSE of each over all
  scored doubles, divided by the additive baseline's (unclipped, as in ``benchmarks/perturbation.py``).
* ``test`` (a diagnosis; nothing is chosen on it): every prior as the package builds them
  (:func:`sciml.perturbation.task.build`, choices on training + val) on the test doubles, same ratio.

Usage::

    python benchmarks/perturbation_prior.py [--settings default cooperative noisy] [--seeds 0 1 2]
        [--work DIR] [--output benchmarks/results/perturbation_prior.json]
    python benchmarks/perturbation_prior.py --settings knockout activation_small wide \
        --output benchmarks/results/perturbation_prior_unseen.json   # settings the choice was not made on
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import torch

from sciml.cli.config import load_config
from sciml.perturbation.data.anndata_io import write_h5ad
from sciml.perturbation.screen import double_keys, read_doubles, read_screen, training_doubles
from sciml.perturbation.select import choose_masking, choose_shrink, fit_joint
from sciml.perturbation.settings import JOINT
from sciml.perturbation.sim.simulate import simulate
from sciml.perturbation.task import build

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_json  # noqa: E402  (benchmarks/_results.py: complete runs only, atomic)
from perturbation import OTHER, SETTINGS, seeded_case  # noqa: E402  (the prior was chosen on SETTINGS)

ROOT = Path(__file__).resolve().parents[1]
FOLDS = 5


PRIORS = ("masking", "masking_open", "combination", "blend", "blend_single", "blend_eb")
MASKING = ("masking", "masking_open", "blend", "blend_single", "blend_eb")  # masking_open: flow.closure off
OTHER_DENOISE = {"blend_single": "eb_single", "blend_eb": "eb"}  # the recipe's blend with other singles


def case_config(setting: str, seed: int, work: Path, prior: str) -> dict:
    """The flow recipe on the simulated screen of ``setting``/``seed`` with ``prior`` (one of :data:`PRIORS`)."""
    path = work / f"grn_{setting}_seed{seed}.h5ad"
    if not path.exists():
        data_cfg = load_config(ROOT / "configs" / "data" / f"grn_{setting}.yaml")["grn"]
        write_h5ad(simulate(data_cfg | {"seed": seed}), path)
    cfg = seeded_case(load_config(ROOT / "configs" / "perturbation" / "grn_default.yaml"), path, seed)
    if not prior.startswith("blend"):  # the recipe's blend of masking and combination; the others alone
        cfg["model"]["flow"] |= {"blend": 1.0}
    if prior in OTHER_DENOISE:
        cfg["model"]["flow"] |= {"denoise": OTHER_DENOISE[prior]}
    if prior == "combination":
        cfg["model"]["flow"] |= {"prior": "combination", "shrink": "auto"}
    if prior == "masking_open":
        cfg["model"]["flow"] |= {"closure": False}
    return cfg


class Subset:
    """A data module seen with other condition lists: ``train`` = the given keys, no val (for nested fitting)."""

    def __init__(self, dm, train: list[str]) -> None:
        self._dm = dm
        self.conditions = {"train": list(train), "val": [], "calib": [], "test": []}

    def __getattr__(self, name: str):
        return getattr(self._dm, name)


def sq_error(model, dm, keys: list[str], additive: bool = False) -> torch.Tensor:
    """Per-double MSE ``(D,)`` of the model's prior mean (control mean + prior, clipped at 0).

    ``additive``: the additive baseline's unclipped mean instead (as in ``benchmarks/perturbation.py``).
    """
    obs = read_doubles(dm, keys)
    if additive:
        pred = obs.mu0 + model.single_effect[model.rows[obs.pert]].sum(1)
    else:
        with torch.no_grad():
            pred = (obs.mu0 + model.prior_mean(obs.pert)).clamp_min(0.0)
    return (pred - obs.target).pow(2).mean(-1)


def folds(n: int, seed: int) -> list[np.ndarray]:
    """``FOLDS`` disjoint index sets covering ``range(n)`` (seeded permutation)."""
    order = np.random.default_rng(seed).permutation(n)
    return [np.sort(order[k::FOLDS]) for k in range(min(FOLDS, n))]


def fit_on(models: dict, dm, screen, keys: list[str], seed: int) -> dict:
    """Fit every prior on the doubles ``keys`` only, their own choices included; return the choices.

    ``screen``: :func:`sciml.perturbation.screen.read_screen` of ``dm`` (its singles, control mean and closure).
    """
    sub = Subset(dm, keys)
    inner = dataclasses.replace(screen, doubles={"train": read_doubles(dm, keys), "val": read_doubles(dm, [])},
                                rule_doubles=training_doubles(sub))
    out = {}
    for name in MASKING:
        model = models[name]
        settings = model.prior_settings  # the recipe's empirical-Bayes singles stay; else τ is chosen
        settings = settings.replace(kappa="auto", denoise=settings.denoise if settings.empirical_bayes else "auto")
        chosen = choose_masking(settings, inner, seed=seed).settings
        if chosen.denoise == JOINT:  # the singles refitted on the inner doubles
            model.set_joint_singles(fit_joint(screen.singles, inner.doubles["train"]))
        model.set_prior(chosen)
        out[name] = {"kappa": chosen.kappa, "denoise": chosen.denoise}
    for name in ("combination", "blend", "blend_single", "blend_eb"):
        model = models[name]
        model.fit_combination(inner.rule_doubles, screen.ctrl_mean, seed)
        shrink = choose_shrink(model.prior_settings, inner, model.combination, seed=seed).settings.shrink
        model.set_prior(shrink=shrink)
        out[name] = out.get(name, {}) | {"shrink": shrink}
    return out


def design(dm, models: dict, seed: int) -> dict:
    """Nested comparison on the training folds and val (module docstring): MSE ratios to additive."""
    screen = read_screen(dm)
    train, val = (double_keys(dm, models["masking"].has_effect, split) for split in ("train", "val"))
    outer = [([train[i] for i in range(len(train)) if i not in set(f)], [train[i] for i in f])
             for f in folds(len(train), seed + 100)]
    outer.append((train, val))
    err = {"additive": [], **{name: [] for name in PRIORS}}
    chosen = []
    for inner, held in outer:
        chosen.append(fit_on(models, dm, screen, inner, seed))
        err["additive"].append(sq_error(models["masking"], dm, held, additive=True))
        for name in PRIORS:
            err[name].append(sq_error(models[name], dm, held))
    mse = {k: float(torch.cat(v).mean()) for k, v in err.items()}
    return {"n_scored": sum(len(h) for _, h in outer), "mse": mse, "chosen_per_fold": chosen,
            "ratio": {k: mse[k] / mse["additive"] for k in PRIORS}}


def run(setting: str, seed: int, work: Path) -> dict:
    """Design comparison, then both priors as the package builds them (choices on training + val) on test."""
    built = {prior: build(case_config(setting, seed, work, prior), None) for prior in PRIORS}
    test = {}
    for prior, (dm, model) in built.items():
        keys = double_keys(dm, model.has_effect, "test")
        ratio = float(sq_error(model, dm, keys).mean()) / float(sq_error(model, dm, keys, additive=True).mean())
        flow = model.prior_settings.to_flow()
        test[prior] = {"ratio": ratio, "chosen": {k: flow[k] for k in ("kappa", "denoise", "closure", "shrink",
                                                                      "blend")}}
    dm = built["masking"][0]
    result = design(dm, {prior: model for prior, (_, model) in built.items()}, seed)
    return {"setting": setting, "seed": seed, "design": result, "test": test}


def case_arguments(argv: list[str] | None, description: str, settings: tuple[str, ...],
                   output: str) -> tuple[argparse.Namespace, Path]:
    """``--settings``, ``--seeds``, ``--work``, ``--output`` of a simulator-case script; one torch thread; work dir."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--settings", nargs="+", default=list(settings), choices=SETTINGS + OTHER,
                   help=f"simulator settings (configs/data/grn_<name>.yaml); not tuned on: {', '.join(OTHER)}")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--work", default="benchmarks/runs/perturbation")
    p.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / output))
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    return args, work


def main(argv: list[str] | None = None) -> int:
    """Run every case and write the JSON."""
    args, work = case_arguments(argv, __doc__.splitlines()[0], SETTINGS, "perturbation_prior.json")
    rows = []
    for setting in args.settings:
        for seed in args.seeds:
            rows.append(run(setting, seed, work))
            d, t = rows[-1]["design"]["ratio"], rows[-1]["test"]
            print(f"{setting} seed {seed}: design (train folds + val) "
                  + " ".join(f"{k} {d[k]:.3f}" for k in PRIORS) + " | test "
                  + " ".join(f"{k} {t[k]['ratio']:.3f}" for k in PRIORS) + " (x additive)", flush=True)
    summary = {k: float(np.mean([r["design"]["ratio"][k] for r in rows])) for k in PRIORS}
    summary |= {f"test_{k}": float(np.mean([r["test"][k]["ratio"] for r in rows])) for k in PRIORS}
    print(f"mean: {summary}")
    write_json(args.output, json.loads(json.dumps({"summary_mean_ratio": summary, "cases": rows}, default=float)))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
