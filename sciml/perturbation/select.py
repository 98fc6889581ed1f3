r"""Choices made on held-out conditions that are not test: the rule's shrinkage towards additive, and the fallback.

* :func:`choose_shrink` (when the model is built, ``flow.shrink: auto``): the prior mean of a double of known singles
  is ``Δa + Δb + λ·(rule − Δa − Δb)``; ``λ`` is the grid value with the smallest mean squared error of that prior
  mean over the **val** doubles plus the training doubles predicted by the rule refitted without them (``folds``-fold
  cross-fitting), so a screen where the rule does not generalise gets ``λ = 0``, the additive prior. Ties go to
  the smaller ``λ``. Test conditions are never read.
* :func:`choose_masking` (when the model is built, ``flow.prior: masking`` with ``flow.kappa`` / ``flow.denoise``
  ``auto``): the masking weight ``κ`` and the denoising threshold ``τ`` of
  :func:`~sciml.perturbation.nn.masking.masking_prior` (or only ``κ`` when ``flow.denoise`` is fixed, e.g.
  ``eb`` / ``eb_single``: empirical-Bayes shrinkage of the singles, :mod:`sciml.perturbation.nn.shrinkage`), the
  grid pair with the smallest mean squared error of the prior mean (clipped at 0) over the **training and val**
  doubles. Under ``flow.denoise: eb_joint`` the singles are fitted with the training doubles
  (:func:`fit_joint`), so a training double is scored only by singles refitted without it (:data:`JOINT_FOLDS`
  folds, as in :func:`choose_shrink`), val by the singles of all training doubles. Two scalars per screen: on the
  nine simulator cases of ``benchmarks/perturbation.py``, choosing them on the training doubles without one fold (or
  without val) and scoring the left-out fold and val gives 0.62× the additive MSE, against 0.67× for the shrunk
  combination rule (``benchmarks/perturbation_prior.py``). Ties go to the smaller values (towards additive).
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

import numpy as np
import torch

from sciml.perturbation.nn.shrinkage import EB_DENOISERS, JOINT_DENOISER

SHRINK_GRID = (0.0, 0.25, 0.5, 0.75, 1.0)
KAPPA_GRID = tuple(i / 10 for i in range(11))
DENOISE_GRID = (0.0, 0.5, 1.0, 2.0, 4.0)  # τ: squared standard errors below which an effect counts as noise
JOINT_FOLDS = 5  # flow.denoise eb_joint: κ scored on val and on training folds the joint singles were not fitted on
MIN_VAL_CONDITIONS = 3  # fewer val conditions than this: the model does not claim to beat additive


def _delta(dm, key: str) -> torch.Tensor:
    return torch.as_tensor(dm.cells(key).mean(0) - dm.control_matrix(key).mean(0), dtype=torch.float32)


def double_keys(model, dm, split: str) -> list[str]:
    """The split's doubles whose two singles the model knows."""
    return [key for key in dm.conditions[split]
            if len(dm.perturbation(key)) == 2 and all(bool(model.has_effect[i]) for i in dm.encode(key))]


def _doubles(model, dm, split: str) -> list[tuple[int, int, torch.Tensor]]:
    """``(a, b, Δ_ab)`` of the split's doubles whose two singles the model knows."""
    return [(*dm.encode(key), _delta(dm, key)) for key in double_keys(model, dm, split)]


def observed(dm, keys: list[str]) -> dict:
    """``pert`` ``(D, 2)``, control mean ``mu0`` and observed mean ``target`` ``(D, G)`` of the conditions ``keys``."""
    return {"pert": torch.tensor([dm.encode(k) for k in keys]).reshape(-1, 2),
            "mu0": torch.as_tensor(np.stack([dm.control_matrix(k).mean(0) for k in keys]), dtype=torch.float32),
            "target": torch.as_tensor(np.stack([dm.cells(k).mean(0) for k in keys]), dtype=torch.float32)}


def prior_errors(model, obs: dict) -> torch.Tensor:
    """Per-condition MSE ``(D,)`` of the prior mean (control mean + prior, clipped at 0) on :func:`observed` ``obs``."""
    with torch.no_grad():
        pred = (obs["mu0"] + model.prior_mean(obs["pert"])).clamp_min(0.0)
    return (pred - obs["target"]).pow(2).mean(-1)


def _rule(rule, model, rows) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Additive, rule prediction, target ``(D, G)`` and own-column mask of ``rows``."""
    a = torch.tensor([r[0] for r in rows])
    b = torch.tensor([r[1] for r in rows])
    da, db = model.single_effect[a], model.single_effect[b]
    with torch.no_grad():
        pred = rule(da, db, model.ctrl_mean)
    own = torch.zeros_like(da, dtype=torch.bool)
    if model.flow["own_genes"] == "additive":
        own = model._own_columns(torch.stack([a, b], 1), da.shape[-1])
    return da + db, torch.where(own, da + db, pred), torch.stack([r[2] for r in rows]), own


def _folds(n: int, folds: int, seed: int) -> list[set[int]]:
    """``min(folds, n)`` disjoint index sets covering ``range(n)`` (a seeded permutation dealt round-robin)."""
    order = np.random.default_rng(seed).permutation(n)
    return [{int(i) for i in order[k::folds]} for k in range(min(folds, n))]


def choose_shrink(model, dm, grid: tuple[float, ...] = SHRINK_GRID, folds: int = 5, seed: int = 0) -> dict:
    """Choose ``λ`` (see the module docstring) for a model whose rule is fitted; returns ``{"shrink", "mse", "n"}``.

    ``mse``: the criterion per grid value; ``n``: doubles behind it (val, cross-fitted training). Without a rule
    or without any usable double, ``λ = 0``.
    """
    if model.combination is None:
        return {"shrink": 0.0, "mse": {}, "n": {"val": 0, "train": 0}}
    val = _doubles(model, dm, "val")
    train = _doubles(model, dm, "train")
    parts = []
    if val:
        parts.append(_rule(model.combination, model, val))
    if len(train) >= 2:
        for fold in _folds(len(train), folds, seed):
            held = [train[i] for i in sorted(fold)]
            rest = [r for i, r in enumerate(train) if i not in fold]
            rule = copy.deepcopy(model.combination).requires_grad_(True)
            rule.fit(model.single_effect[[r[0] for r in rest]], model.single_effect[[r[1] for r in rest]],
                     model.ctrl_mean, torch.stack([r[2] for r in rest]), seed=seed)
            parts.append(_rule(rule.requires_grad_(False), model, held))
    if not parts:
        return {"shrink": 0.0, "mse": {}, "n": {"val": 0, "train": 0}}
    add, rule, target = (torch.cat([p[i] for p in parts]) for i in range(3))
    mse = {float(lam): float((add + lam * (rule - add) - target).pow(2).mean()) for lam in grid}
    best = min(mse, key=lambda lam: (round(mse[lam], 12), lam))
    return {"shrink": best, "mse": mse, "n": {"val": len(val), "train": len(train) if len(train) >= 2 else 0}}


def choose_masking(model, dm, kappas: tuple[float, ...] = KAPPA_GRID,
                   taus: tuple[float, ...] = DENOISE_GRID, seed: int = 0) -> dict:
    """Choose ``flow.kappa`` and ``flow.denoise`` where they are ``"auto"`` (module docstring); set and return them.

    Returns ``{"kappa", "denoise", "mse": {"kappa,tau": value}, "n"}`` (``n``: training + val doubles used). A value
    that is not ``"auto"`` stays fixed; without a usable double both auto values become 0 (additive). Under
    ``flow.blend`` they are chosen for the masking prior alone (blend off while choosing, then restored).
    """
    blend = model.flow.get("blend", 1.0)
    model.set_flow(blend=1.0)
    try:
        return _choose_masking(model, dm, kappas, taus, seed)
    finally:
        model.set_flow(blend=blend)


def _choose_masking(model, dm, kappas: tuple[float, ...], taus: tuple[float, ...], seed: int) -> dict:
    """:func:`choose_masking` with ``flow.blend`` off."""
    fixed = {k: model.flow[k] for k in ("kappa", "denoise")}
    grid = {"kappa": kappas if fixed["kappa"] == "auto" else (float(fixed["kappa"]),),
            "denoise": taus if fixed["denoise"] == "auto" else (_denoise_value(fixed["denoise"]),)}
    train, val = double_keys(model, dm, "train"), double_keys(model, dm, "val")
    parts = [(train + val, train)]  # (scored doubles, doubles the singles are fitted with)
    if fixed["denoise"] == JOINT_DENOISER and train:  # cross-fitted: no double scores singles fitted on it
        parts = [(val, train)] if val else []
        for fold in _folds(len(train), JOINT_FOLDS, seed):
            parts.append(([train[i] for i in sorted(fold)], [key for i, key in enumerate(train) if i not in fold]))
    errors = {(kappa, tau): [] for kappa in grid["kappa"] for tau in grid["denoise"]}
    for scored, fitted in [p for p in parts if p[0]]:
        if fixed["denoise"] == JOINT_DENOISER:
            fit_joint(model, dm, fitted)
        obs = observed(dm, scored)
        for kappa, tau in errors:
            model.set_flow(kappa=kappa, denoise=tau)
            errors[(kappa, tau)].append(prior_errors(model, obs))
    if fixed["denoise"] == JOINT_DENOISER:
        fit_joint(model, dm, train)
    mse = {k: float(torch.cat(e).mean()) for k, e in errors.items() if e}
    if mse:
        best = min(mse, key=lambda k: (round(mse[k], 12), k))
    else:
        best = (0.0 if fixed["kappa"] == "auto" else float(fixed["kappa"]),
                0.0 if fixed["denoise"] == "auto" else _denoise_value(fixed["denoise"]))
    model.set_flow(kappa=best[0], denoise=best[1])
    return {"kappa": best[0], "denoise": best[1], "mse": {f"{k},{t}": v for (k, t), v in mse.items()},
            "n": len(train) + len(val)}


def fit_joint(model, dm, keys: list[str]) -> None:
    """Set ``model``'s joint singles (:mod:`sciml.perturbation.nn.joint`) from its singles and the doubles ``keys``.

    Each double's effect against its own controls, with squared standard error ``var(cells)/n + var(ctrl)/n_ctrl``
    (as for the singles, :func:`sciml.perturbation.task.training_single_variances`).
    """
    from sciml.perturbation.nn.joint import joint_singles
    from sciml.perturbation.task import _mean_variance

    known = torch.nonzero(model.has_effect).flatten()
    if not keys:  # no double: the measured singles
        model.set_joint_singles(model.single_effect[known], model.single_var[known])
        return
    row = {int(i): j for j, i in enumerate(known)}
    obs = observed(dm, keys)
    pairs = torch.tensor([[row[int(a)], row[int(b)]] for a, b in obs["pert"]], dtype=torch.long).reshape(-1, 2)
    var = np.stack([_mean_variance(dm.cells(k)) + _mean_variance(dm.control_matrix(k)) for k in keys])
    effect, joint_var = joint_singles(model.single_effect[known], model.single_var[known], pairs,
                                      obs["target"] - obs["mu0"], torch.as_tensor(var, dtype=torch.float32))
    model.set_joint_singles(effect, joint_var)


def _denoise_value(value) -> float | str:
    """A fixed ``flow.denoise``: τ as a float, or a name of :data:`EB_DENOISERS` (empirical-Bayes shrinkage)."""
    return value if value in EB_DENOISERS else float(value)


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
    module.set_flow(additive_fallback=fallback)
    if fallback and dm is not None:
        from sciml.perturbation.baselines.simple import Additive

        module.set_unknown_effect(torch.as_tensor(Additive().fit(dm).mean_delta))
    return fallback
