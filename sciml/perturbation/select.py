r"""Choices made on held-out conditions that are not test: the prior's ``auto`` settings, and the additive fallback.

Every choice scores candidate :class:`~sciml.perturbation.settings.PriorSettings` on a
:class:`~sciml.perturbation.screen.Screen` (what the data measured, read once) through the pure
:func:`~sciml.perturbation.prior.prior_mean`, and returns the chosen settings; nothing is set on a model.
:func:`resolve` runs them in order when the model is built.

* :func:`choose_shrink` (``flow.shrink: auto``): the prior mean of a double of known singles is
  ``Δa + Δb + λ·(rule − Δa − Δb)``; ``λ`` is the grid value with the smallest mean squared error of that prior mean
  over the **val** doubles plus the training doubles predicted by the rule refitted without them (``folds``-fold
  cross-fitting), so a screen where the rule does not generalise gets ``λ = 0``, the additive prior. Ties go to
  the smaller ``λ``. Test conditions are never read. The refits see at most :data:`REFIT_ENTRIES` (double, gene)
  entries each, a seeded subsample (the rule itself up to
  :data:`~sciml.perturbation.nn.combination.FIT_ENTRIES`): on the 1,000-gene screen of
  ``benchmarks/perturbation_scale.py`` this moves the criterion by < 0.4% (λ = 1: 0.05709 → 0.05728) and
  chooses the same ``λ``, with two fifths of the entries (50,000 at most before).
* :func:`choose_masking` (``flow.prior: masking`` with ``flow.kappa`` / ``flow.denoise`` ``auto``): the masking
  weight ``κ`` and the denoising threshold ``τ`` of :func:`~sciml.perturbation.nn.masking.masking_prior` (or only
  ``κ`` when ``flow.denoise`` names an empirical-Bayes shrinkage, :mod:`sciml.perturbation.nn.shrinkage`), the grid
  pair with the smallest mean squared error of the prior mean (clipped at 0) over the **training and val** doubles.
  Under ``flow.denoise: eb_joint`` the singles are fitted with the training doubles (:func:`fit_joint`), so a
  training double is scored only by singles refitted without it (:data:`JOINT_FOLDS` folds, as in
  :func:`choose_shrink`), val by the singles of all training doubles (fitted once, :func:`resolve` keeps them).
  Ties go to the smaller values (towards additive). Two scalars per screen; how the priors compare on held-out
  folds: docs/benchmarks.md (``benchmarks/perturbation_prior.py``).
* :func:`versus_additive` / :func:`apply_fallback` (at export, and in the benchmark the same way): the flow model's
  generated mean against the additive baseline on the **val** conditions; when the model is not better, or val holds
  fewer than :data:`MIN_VAL_CONDITIONS` conditions (one or two held-out conditions are not evidence that a
  trained model beats a closed-form baseline: the simpler model stands), the model is switched to
  ``flow.additive_fallback`` and says so: its generated mean is then exactly the
  additive baseline's prediction (control mean + sum of the measured singles' effects, clipped at 0), the network only
  shaping the cells around it.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass

import numpy as np
import torch

from sciml.perturbation.nn.joint import joint_singles
from sciml.perturbation.prior import PriorTables, Singles, condition_singles, own_columns, prior_mean, shrunk_table
from sciml.perturbation.progress import note
from sciml.perturbation.screen import Doubles, Screen
from sciml.perturbation.settings import AUTO, JOINT, PriorSettings

log = logging.getLogger(__name__)

SHRINK_GRID = (0.0, 0.25, 0.5, 0.75, 1.0)
KAPPA_GRID = tuple(i / 10 for i in range(11))
DENOISE_GRID = (0.0, 0.5, 1.0, 2.0, 4.0)  # τ: squared standard errors below which an effect counts as noise
JOINT_FOLDS = 5  # flow.denoise eb_joint: κ scored on val and on training folds the joint singles were not fitted on
REFIT_ENTRIES = 20_000  # (double, gene) entries each cross-fitting refit of the combination rule sees at most
MIN_VAL_CONDITIONS = 3  # fewer val conditions than this: the model does not claim to beat additive


@dataclass(frozen=True)
class Choice:
    """A choice of settings and its evidence.

    Attributes
    ----------
    settings : PriorSettings
        The settings given, with the chosen values.
    mse : dict
        The criterion per candidate (``"λ"`` or ``"κ,τ"`` as text).
    n : int or dict
        Doubles behind it (:func:`choose_shrink`: ``{"val", "train"}``; :func:`choose_masking`: training + val).

    """

    settings: PriorSettings
    mse: dict[str, float]
    n: int | dict[str, int]


@dataclass(frozen=True)
class Resolved:
    """What a screen decides about the prior.

    Attributes
    ----------
    settings : PriorSettings
        The settings with every ``auto`` value chosen.
    joint : Singles or None
        The singles fitted jointly with every training double (:func:`fit_joint`; ``denoise: eb_joint`` of the
        masking prior), else ``None``.

    """

    settings: PriorSettings
    joint: Singles | None = None


def resolve(settings: PriorSettings, screen: Screen, rule=None, seed: int = 0) -> Resolved:
    """``settings`` with every ``auto`` value chosen on ``screen`` (``λ``, then the closure, then ``κ``, ``τ``).

    ``rule``: the fitted :class:`~sciml.perturbation.nn.combination.CombinationRule` (``None``: none).
    ``flow.closure`` ``auto`` is on for closed data; ``true`` on data that are not closed is a ``ValueError``.
    Under ``denoise: eb_joint`` the joint singles of every training double come with the settings (fitted once:
    they also score κ on val). The choices are logged.
    """
    joint = None
    if settings.prior == "masking" and settings.denoise == JOINT:
        joint = fit_joint(screen.singles, screen.doubles["train"])
    if settings.shrink == AUTO:
        choice = choose_shrink(settings, screen, rule, seed=seed)
        settings = choice.settings
        log.info("flow.shrink auto: %s (prior-mean MSE per value %s over %s doubles)", settings.shrink,
                 {k: round(v, 5) for k, v in choice.mse.items()}, choice.n)
    if settings.prior == "masking" and settings.closure is not False:
        if screen.closure is None and settings.closure is True:
            raise ValueError("config model.flow.closure is true, but the control cells of the data are not closed "
                             "(one cell type, the same sum of expm1(x) in every cell); set closure: auto or false")
        settings = settings.replace(closure=screen.closure is not None)
        log.info("flow.closure: %s", "on (closed data)" if settings.closed else "off (data not closed)")
    if settings.prior == "masking" and AUTO in (settings.kappa, settings.denoise):
        choice = choose_masking(settings, screen, seed=seed, joint=joint)
        settings = choice.settings
        log.info("flow.prior masking: kappa %s, denoise %s (chosen on %d training + val doubles)", settings.kappa,
                 settings.denoise, choice.n)
    return Resolved(settings, joint)


def prior_errors(singles: Singles, settings: PriorSettings, tables: PriorTables, doubles: Doubles) -> torch.Tensor:
    """Per-double MSE ``(D,)`` of the prior mean (control mean + prior, clipped at 0) of ``doubles``."""
    d, known = condition_singles(doubles.pert, singles.effect, singles.known, singles.rows)
    with torch.no_grad():
        pred = (doubles.mu0 + prior_mean(d, known, doubles.pert, settings, tables)).clamp_min(0.0)
    return (pred - doubles.target).pow(2).mean(-1)


def _rule(rule, singles: Singles, ctrl_mean: torch.Tensor, own_genes: str, doubles: Doubles):
    """Additive, rule prediction, target ``(D, G)`` and own-column mask of ``doubles``."""
    a, b = doubles.pert[:, 0], doubles.pert[:, 1]
    da, db = singles.take(singles.effect, a), singles.take(singles.effect, b)
    with torch.no_grad():
        pred = rule(da, db, ctrl_mean)
    own = torch.zeros_like(da, dtype=torch.bool)
    if own_genes == "additive":
        own = own_columns(doubles.pert, da.shape[-1])
    return da + db, torch.where(own, da + db, pred), doubles.delta, own


def _folds(n: int, folds: int, seed: int) -> list[set[int]]:
    """``min(folds, n)`` disjoint index sets covering ``range(n)`` (a seeded permutation dealt round-robin)."""
    order = np.random.default_rng(seed).permutation(n)
    return [{int(i) for i in order[k::folds]} for k in range(min(folds, n))]


def _split(doubles: Doubles, fold: set[int]) -> tuple[Doubles, Doubles]:
    """The doubles of ``fold`` (held out) and the others."""
    return (doubles.take(sorted(fold)), doubles.take([i for i in range(len(doubles)) if i not in fold]))


def choose_shrink(settings: PriorSettings, screen: Screen, rule, grid: tuple[float, ...] = SHRINK_GRID,
                  folds: int = 5, seed: int = 0) -> Choice:
    """Choose ``λ`` (module docstring) for the fitted combination ``rule``; the settings with ``shrink`` set.

    ``mse``: the criterion per grid value; ``n``: doubles behind it (val, cross-fitted training). Without a rule
    or without any usable double, ``λ = 0``. The rule is refitted on copies only, on at most :data:`REFIT_ENTRIES`
    entries each.
    """
    none = Choice(settings.replace(shrink=0.0), {}, {"val": 0, "train": 0})
    if rule is None:
        return none
    singles, val, train = screen.singles, screen.doubles["val"], screen.doubles["train"]
    parts = []
    if len(val):
        parts.append(_rule(rule, singles, screen.ctrl_mean, settings.own_genes, val))
    if len(train) >= 2:
        for k, fold in enumerate(_folds(len(train), folds, seed)):
            note(f"prior: refitting the combination rule without fold {k + 1} of {min(folds, len(train))}")
            held, rest = _split(train, fold)
            refit = copy.deepcopy(rule).requires_grad_(True)
            refit.fit(singles.take(singles.effect, rest.pert[:, 0]), singles.take(singles.effect, rest.pert[:, 1]),
                      screen.ctrl_mean, rest.delta, seed=seed, max_entries=REFIT_ENTRIES)
            parts.append(_rule(refit.requires_grad_(False), singles, screen.ctrl_mean, settings.own_genes, held))
    if not parts:
        return none
    add, pred, target = (torch.cat([p[i] for p in parts]) for i in range(3))
    mse = {float(lam): float((add + lam * (pred - add) - target).pow(2).mean()) for lam in grid}
    best = min(mse, key=lambda lam: (round(mse[lam], 12), lam))
    return Choice(settings.replace(shrink=best), {str(k): v for k, v in mse.items()},
                  {"val": len(val), "train": len(train) if len(train) >= 2 else 0})


def masking_tables(settings: PriorSettings, screen: Screen, fitted: Doubles,
                   joint: Singles | None = None) -> PriorTables:
    """The tables of the masking prior under ``settings``; ``eb_joint``: singles fitted with the doubles ``fitted``.

    ``joint``: :func:`fit_joint` of ``fitted``, when the caller has it already (else it is computed here).
    """
    singles, shrunk = screen.singles, None
    if settings.empirical_bayes:
        if settings.denoise != JOINT:
            effect, var = singles.effect, singles.var
        else:
            fit = joint if joint is not None else fit_joint(singles, fitted)
            effect, var = fit.effect, fit.var
        shrunk = shrunk_table(effect, var, singles.known, singles.rows, settings.denoise)
    return PriorTables(var=singles.var, shrunk=shrunk, closure=screen.closure if settings.closed else None,
                       rows=singles.rows)


def choose_masking(settings: PriorSettings, screen: Screen, kappas: tuple[float, ...] = KAPPA_GRID,
                   taus: tuple[float, ...] = DENOISE_GRID, seed: int = 0,
                   joint: Singles | None = None) -> Choice:
    """Choose ``flow.kappa`` and ``flow.denoise`` where they are ``"auto"`` (module docstring).

    Returns the settings with both set, ``mse`` per ``"κ,τ"`` and ``n`` (training + val doubles used). A value that
    is not ``"auto"`` stays fixed; without a usable double both auto values become 0 (additive). They are chosen
    for the masking prior alone (``flow.blend`` 1 while scoring). Under ``eb_joint`` a training double is scored
    only by singles fitted without it (:data:`JOINT_FOLDS` folds), val by those of every training double
    (``joint``: :func:`fit_joint` of every training double, when the caller has it).
    """
    base = settings.replace(blend=1.0)
    grid = {"kappa": kappas if settings.kappa == AUTO else (settings.kappa,),
            "denoise": taus if settings.denoise == AUTO else (settings.denoise,)}
    train, val = screen.doubles["train"], screen.doubles["val"]
    parts = [(train + val, train)]  # (scored doubles, doubles the singles are fitted with)
    if settings.denoise == JOINT and len(train):  # cross-fitted: no double scores singles fitted on it
        parts = [(val, train)] if len(val) else []
        for fold in _folds(len(train), JOINT_FOLDS, seed):
            held, rest = _split(train, fold)
            parts.append((held, rest))
    errors = {(kappa, tau): [] for kappa in grid["kappa"] for tau in grid["denoise"]}
    used = [p for p in parts if len(p[0])]
    for k, (scored, fitted) in enumerate(used):
        note(f"prior: scoring kappa on {len(scored)} doubles (part {k + 1} of {len(used)})")
        tables = masking_tables(base.replace(denoise=grid["denoise"][0]), screen, fitted,
                                joint if fitted is train else None)
        for kappa, tau in errors:
            errors[(kappa, tau)].append(prior_errors(screen.singles, base.replace(kappa=kappa, denoise=tau),
                                                     tables, scored))
    mse = {k: float(torch.cat(e).mean()) for k, e in errors.items() if e}
    if mse:
        best = min(mse, key=lambda k: (round(mse[k], 12), k))
    else:
        best = (0.0 if settings.kappa == AUTO else settings.kappa,
                0.0 if settings.denoise == AUTO else settings.denoise)
    return Choice(settings.replace(kappa=best[0], denoise=best[1]), {f"{k},{t}": v for (k, t), v in mse.items()},
                  len(train) + len(val))


def fit_joint(singles: Singles, doubles: Doubles) -> Singles:
    """Singles estimated jointly with ``doubles`` (:mod:`sciml.perturbation.nn.joint`), in the layout of ``singles``.

    Each double's effect against its own controls, with its squared standard error; rows of unknown singles stay
    as measured (0). Without doubles: the measured singles.
    """
    effect, var = singles.effect.clone(), singles.var.clone()
    if not len(doubles):
        return Singles(effect, var, singles.known, singles.rows)
    known = torch.nonzero(singles.known).flatten()
    at = singles.rows[known]
    row = {int(i): j for j, i in enumerate(known)}
    pairs = torch.tensor([[row[int(a)], row[int(b)]] for a, b in doubles.pert], dtype=torch.long).reshape(-1, 2)
    fitted, fitted_var = joint_singles(singles.effect[at], singles.var[at], pairs, doubles.target - doubles.mu0,
                                       doubles.var)
    effect[at] = fitted.to(effect)
    var[at] = fitted_var.to(var)
    return Singles(effect, var, singles.known, singles.rows)


def versus_additive(module, dm, n_cells: int = 128, seed: int = 0, steps: int | None = None,
                    method: str | None = None, min_val: int = MIN_VAL_CONDITIONS) -> dict:
    """Mean MSE of the generated mean and of the additive baseline over the val conditions.

    Returns ``{"flow_mse", "additive_mse", "n_val", "min_val", "beats_additive"}``: ``beats_additive`` needs a
    smaller mean MSE on at least ``min_val`` val conditions (False on an empty val).
    """
    from sciml.perturbation.baselines.simple import Additive
    from sciml.perturbation.evaluate import split_predictions

    keys = list(dm.conditions["val"])
    if not keys:
        return {"flow_mse": None, "additive_mse": None, "n_val": 0, "min_val": min_val, "beats_additive": False}
    cells = split_predictions(module, dm, "val", n_cells, seed, steps, method)
    additive = Additive().fit(dm)
    flow, base = [], []
    for key in keys:
        true = dm.cells(key).mean(0)
        flow.append(float(np.mean((cells[key].mean(0) - true) ** 2)))
        base.append(float(np.mean((additive.predict_mean(key) - true) ** 2)))
    out = {"flow_mse": float(np.mean(flow)), "additive_mse": float(np.mean(base)), "n_val": len(keys),
           "min_val": min_val}
    return out | {"beats_additive": out["flow_mse"] < out["additive_mse"] and len(keys) >= min_val}


def apply_fallback(module, check: dict, dm=None) -> bool:
    """Switch ``module`` to ``flow.additive_fallback`` unless ``check`` (:func:`versus_additive`) beats additive.

    The setting is saved in the config of its checkpoint or artifact. With the data module ``dm`` the stand-in
    effect of a single never measured in training (``module.unknown_effect``) becomes the additive baseline's
    (:class:`~sciml.perturbation.baselines.simple.Additive`: the mean effect of the training conditions), so a
    fallen-back model's generated mean is that baseline's prediction on every condition of a one-cell-type screen.
    Returns whether the fallback is on.
    """
    fallback = not check["beats_additive"]
    module.set_prior(additive_fallback=fallback)
    if fallback and dm is not None:
        from sciml.perturbation.baselines.simple import Additive

        module.set_unknown_effect(torch.as_tensor(Additive().fit(dm).mean_delta))
    return fallback
