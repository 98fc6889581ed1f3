"""Benchmark the calibration layer ``sciml.uq`` against MAPIE 1.6 and crepes 0.9, plus the online/label-cost methods.

One run, same data and α = 0.1 everywhere, one thread. Sections (keys of ``benchmarks/results/uq.json``):

* ``offline_regression``: perov5 ``heat_all`` from element fractions (scikit-learn histogram gradient boosting,
  mean and 5%/95% quantile models, seeded 50/25/25 train/calib/test split); split (absolute), CQR, Mondrian
  by anion; ours vs MAPIE vs crepes: test coverage and mean width.
* ``offline_classification``: ``matbench_expt_is_metal`` from element fractions, APS (and LAC); coverage and size.
* ``fair``: fair conformal with learned groups vs marginal APS on 4-bin expt_gap: coverage, set size, coverage
  in the drawn groups, worst-slab coverage over the chemistry features.
* ``timing``: calibrate on ``n`` and predict ``n`` points (``n`` = 1e5, 1e6), conformal layer only (prefit
  identity models for MAPIE); best of 3 runs in seconds and the ratio library/ours measured in the same run.
* ``online``: ACI, OGD, SF-OGD, PID, COP, UP-OCP (+ ResCP) on changepoint, drift, heavy-tailed streams and the
  statsmodels CO2 series (offline, bundled); long-run coverage, mean/median width, fraction infinite.
* ``small_sample``: SPI (RSA-CP fallback) vs split at m ∈ {20, 40, 80}, 1000 trials.
* ``label_cost``: label-free stopping size vs fixed m: labels, width, coverage, total cost.
* ``active_ppi``: CI width and coverage vs τ.

Usage::

    pip install -e ".[bench]"; python benchmarks/uq.py [--quick]
"""

from __future__ import annotations

import argparse
import bz2
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "materials"
ALPHA = 0.1


def element_fractions(formulas: list[str]) -> tuple[np.ndarray, list]:
    """Element-fraction features ``(n, n_elements)`` and the pymatgen compositions."""
    from pymatgen.core import Composition

    comps = [Composition(f) for f in formulas]
    elements = sorted({el.symbol for c in comps for el in c.elements})
    col = {e: i for i, e in enumerate(elements)}
    x = np.zeros((len(comps), len(elements)))
    for i, c in enumerate(comps):
        for el, frac in c.fractional_composition.items():
            x[i, col[el.symbol]] = frac
    return x, comps


def split3(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeded 50/25/25 train/calib/test indices."""
    perm = np.random.default_rng(seed).permutation(n)
    return perm[: n // 2], perm[n // 2 : 3 * n // 4], perm[3 * n // 4 :]


def _cov_width(lo: np.ndarray, hi: np.ndarray, y: np.ndarray) -> dict:
    return {"coverage": float(((lo <= y) & (y <= hi)).mean()), "width": float((hi - lo).mean())}


def offline_regression() -> dict:
    """Split / CQR / Mondrian-by-anion on perov5 with composition models."""
    import crepes
    import pandas as pd
    from mapie.regression import ConformalizedQuantileRegressor, SplitConformalRegressor
    from sklearn.ensemble import HistGradientBoostingRegressor as HGB

    from sciml.uq import MondrianConformal, SplitConformal

    df = pd.read_csv(DATA / "perov5" / "perov5_train_pool.csv", usecols=["formula", "heat_all"])
    x, comps = element_fractions(list(df["formula"]))
    y = df["heat_all"].to_numpy()
    anion = np.array([max(c.elements, key=lambda e: (e.X, e.Z)).Z for c in comps])
    tr, ca, te = split3(len(y))
    models = {q: HGB(loss="quantile", quantile=q, random_state=0).fit(x[tr], y[tr]) for q in (0.05, 0.5, 0.95)}
    mean = HGB(random_state=0).fit(x[tr], y[tr])
    t = lambda a: torch.as_tensor(a, dtype=torch.float64)  # noqa: E731
    out = {"data": "perov5 heat_all (eV/cell), element fractions", "n_calib": len(ca), "n_test": len(te)}
    ours = SplitConformal("absolute", ALPHA).fit_predictions(t(mean.predict(x[ca])), t(y[ca]))
    band = ours.predict_set(t(mean.predict(x[te])))
    mapie = SplitConformalRegressor(mean, confidence_level=1 - ALPHA, prefit=True).conformalize(x[ca], y[ca])
    m_int = mapie.predict_interval(x[te])[1][:, :, 0]
    cr = crepes.ConformalRegressor().fit(y[ca] - mean.predict(x[ca]))
    c_int = cr.predict_int(mean.predict(x[te]), confidence=1 - ALPHA)
    out["split"] = {"ours": _cov_width(band.lower.numpy(), band.upper.numpy(), y[te]),
                    "mapie": _cov_width(m_int[:, 0], m_int[:, 1], y[te]),
                    "crepes": _cov_width(c_int[:, 0], c_int[:, 1], y[te])}
    qpred = lambda idx: t(np.stack([models[0.05].predict(x[idx]), models[0.95].predict(x[idx])], -1))  # noqa: E731
    cqr = SplitConformal("cqr", ALPHA).fit_predictions(qpred(ca), t(y[ca]))
    band = cqr.predict_set(qpred(te))
    m_cqr = ConformalizedQuantileRegressor([models[0.05], models[0.95], models[0.5]], 1 - ALPHA, prefit=True)
    m_cqr.conformalize(x[ca], y[ca])
    m_int = m_cqr.predict_interval(x[te])[1][:, :, 0]  # MAPIE default: asymmetric correction (α/2 per side)
    m_sym = m_cqr.predict_interval(x[te], symmetric_correction=True)[1][:, :, 0]
    srt = SplitConformal("cqr", ALPHA).fit_predictions(qpred(ca).sort(-1).values, t(y[ca]))
    band_s = srt.predict_set(qpred(te).sort(-1).values)
    out["cqr"] = {"ours": _cov_width(band.lower.numpy(), band.upper.numpy(), y[te]),
                  "ours_sorted_quantiles": _cov_width(band_s.lower.numpy(), band_s.upper.numpy(), y[te]),
                  "mapie_default_asymmetric": _cov_width(m_int[:, 0], m_int[:, 1], y[te]),
                  "mapie_symmetric": _cov_width(m_sym[:, 0], m_sym[:, 1], y[te]),
                  "crossed_quantile_fraction": float((qpred(te)[:, 0] > qpred(te)[:, 1]).double().mean())}
    mond = MondrianConformal("absolute", ALPHA)
    mond.fit_predictions(t(mean.predict(x[ca])), t(y[ca]), torch.as_tensor(anion[ca]))
    band = mond.predict_set(t(mean.predict(x[te])), torch.as_tensor(anion[te]))
    c_int = crepes.ConformalRegressor().fit(y[ca] - mean.predict(x[ca]), bins=anion[ca]).predict_int(
        mean.predict(x[te]), bins=anion[te], confidence=1 - ALPHA)
    res = {"ours": _cov_width(band.lower.numpy(), band.upper.numpy(), y[te]),
           "crepes": _cov_width(c_int[:, 0], c_int[:, 1], y[te]), "mapie": "no Mondrian regression in MAPIE 1.6"}
    for name, lo, hi in (("ours", band.lower.numpy(), band.upper.numpy()), ("crepes", c_int[:, 0], c_int[:, 1])):
        hit = (lo <= y[te]) & (y[te] <= hi)
        res[name]["worst_group_coverage"] = float(min(hit[anion[te] == g].mean() for g in np.unique(anion[te])))
    out["mondrian_by_anion"] = res
    return out


def _matbench_classes(name: str) -> tuple[list[str], np.ndarray]:
    """Compositions and integer classes: ``is_metal`` (2 classes) or the experimental gap in 4 bins (eV)."""
    raw = json.load(bz2.open(DATA / "matbench_v0.1_targets" / f"matbench_{name}.json.bz2"))
    keys = sorted(raw["composition"], key=int)
    if name == "expt_is_metal":
        return [raw["composition"][k] for k in keys], np.array([int(raw["is_metal"][k]) for k in keys])
    gap = np.array([raw["gap expt"][k] for k in keys])
    return [raw["composition"][k] for k in keys], np.digitize(gap, [1e-9, 1.37, 2.37])  # 0 | ≤1.37 | ≤2.37 | >


def _set_metrics(sets, y: np.ndarray) -> dict | None:
    if sets is None:
        return None
    sets = np.asarray(sets)
    return {"coverage": float(sets[np.arange(len(y)), y].mean()), "size": float(sets.sum(1).mean())}


def offline_classification() -> dict:
    """APS and LAC sets on matbench_expt_is_metal and 4-bin expt_gap (composition features, gradient boosting)."""
    import crepes
    from mapie.classification import SplitConformalClassifier
    from sklearn.ensemble import HistGradientBoostingClassifier as HGBC

    from sciml.uq import APS, LAC, SplitConformal

    out = {}
    for dataset in ("expt_is_metal", "expt_gap"):
        formulas, y = _matbench_classes(dataset)
        x, _ = element_fractions(formulas)
        tr, ca, te = split3(len(y))
        clf = HGBC(random_state=0).fit(x[tr], y[tr])
        p_ca, p_te = (torch.as_tensor(clf.predict_proba(x[i]), dtype=torch.float64) for i in (ca, te))
        row = {"classes": int(y.max() + 1), "n_calib": len(ca), "n_test": len(te)}
        gen = torch.Generator().manual_seed(0)
        for name, score in (("aps", APS(randomized=False)), ("aps_randomized", APS()), ("lac", LAC())):
            s_ca = score.score(p_ca, torch.as_tensor(y[ca]), generator=gen)
            thr = SplitConformal("absolute", ALPHA).fit(s_ca).threshold()
            sets = {"ours": score.predict_set(p_te, thr, generator=gen).mask}
            if name != "aps_randomized":
                sets["crepes"] = crepes.ConformalClassifier().fit(s_ca.numpy()).predict_set(
                    score.all_scores(p_te).numpy(), confidence=1 - ALPHA, smoothing=False)
            params = {"include_last_label": "randomized"} if name == "aps_randomized" else None
            try:
                mp = SplitConformalClassifier(clf, 1 - ALPHA, conformity_score=name.split("_")[0], prefit=True,
                                              random_state=0).conformalize(x[ca], y[ca])
                sets["mapie"] = mp.predict_set(x[te], conformity_score_params=params)[1][:, :, 0]
            except ValueError as err:  # MAPIE 1.6 refuses APS for binary targets
                sets["mapie"] = None
                row.setdefault("notes", []).append(f"mapie {name}: {err}")
            row[name] = {lib: _set_metrics(s, y[te]) for lib, s in sets.items()}
        out[dataset] = row
    return out


def _chemistry(comps: list) -> np.ndarray:
    """Sensitive features: fractions of O, halogens, chalcogens, transition metals; element count / 5."""
    sets = [{"O"}, {"F", "Cl", "Br", "I"}, {"S", "Se", "Te"}]
    rows = []
    for c in comps:
        frac = c.fractional_composition
        rows.append([sum(v for el, v in frac.items() if el.symbol in group) for group in sets]
                    + [sum(v for el, v in frac.items() if el.is_transition_metal), len(c.elements) / 5])
    return np.array(rows)


def fair(seed: int = 0) -> dict:
    """Fair conformal (learned worst-covered group) vs marginal APS on 4-bin expt_gap."""
    from sklearn.ensemble import HistGradientBoostingClassifier as HGBC

    from sciml.uq import APS, FairConformal, LabelSet, conformal_pvalues, worst_slab_coverage

    formulas, y = _matbench_classes("expt_gap")
    x, comps = element_fractions(formulas)
    z = torch.as_tensor(_chemistry(comps))
    tr, ca, te = split3(len(y), seed)
    clf = HGBC(random_state=0).fit(x[tr], y[tr])
    g = torch.Generator().manual_seed(seed)
    s_ca, s_te = (APS().all_scores(torch.as_tensor(clf.predict_proba(x[i])), generator=g) for i in (ca, te))
    y_ca, y_te = torch.as_tensor(y[ca]), torch.as_tensor(y[te])
    fc = FairConformal(ALPHA, n_features=z.shape[1], delta=0.3, n_groups=20, seed=seed)
    fc.fit(z[ca], s_ca.gather(-1, y_ca.unsqueeze(-1)).squeeze(-1))
    member = fc.membership(z[te], generator=g)
    sets = {"marginal_aps": LabelSet(conformal_pvalues(fc.scores, s_te) >= ALPHA),
            "fair_learned_groups": fc.predict_set(z[te], s_te, test_in=member)}
    out = {"data": "matbench_expt_gap (4 bins), APS randomised; z = O / halogen / chalcogen / TM fractions, n_el/5",
           "learned_group_mass_test": float(fc.group_prob(z[te]).detach().mean())}
    for name, pset in sets.items():
        hit = pset.contains(y_te)
        in_groups = [hit[member[:, k]].double().mean().item() for k in range(member.shape[1]) if member[:, k].any()]
        out[name] = {"coverage": float(hit.double().mean()), "size": float(pset.size().mean()),
                     "mean_coverage_in_drawn_groups": float(np.mean(in_groups)),
                     "min_coverage_in_drawn_groups": float(np.min(in_groups)),
                     "worst_slab_coverage": float(worst_slab_coverage(pset, y_te, z[te], delta=0.2,
                                                                      generator=torch.Generator().manual_seed(1)).coverage)}
    return out


class _Identity:
    """Prefit scikit-learn-style model whose prediction is the first input column (or the inputs as probabilities)."""

    def __init__(self, proba: bool = False) -> None:
        self.proba, self.fitted_ = proba, True

    def fit(self, x, y):
        return self

    def predict(self, x):
        return x.argmax(1) if self.proba else x[:, 0]

    def predict_proba(self, x):
        return x


def _best_of(fn, repeats: int = 3) -> float:
    """Smallest wall time of ``repeats`` calls (the machine is shared: the minimum is the least noisy)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _time_one(n: int, rng: np.random.Generator, reg, clf) -> dict:
    import crepes
    from mapie.classification import SplitConformalClassifier
    from mapie.regression import SplitConformalRegressor

    from sciml.uq import APS, SplitConformal

    pred, y = rng.normal(size=(n, 1)), rng.normal(size=n)
    probs = rng.dirichlet(np.ones(10), size=n)
    labels = np.array([rng.choice(10, p=p) for p in probs[:2000]] * (n // 2000))
    p_t, y_t, aps = torch.as_tensor(probs), torch.as_tensor(labels), APS(randomized=False)
    runs = {
        "regression_ours": lambda: SplitConformal("absolute", ALPHA).fit(
            torch.as_tensor(np.abs(y - pred[:, 0]))).predict_set(torch.as_tensor(pred[:, 0])),
        "regression_mapie": lambda: SplitConformalRegressor(reg, 1 - ALPHA, prefit=True).conformalize(
            pred, y).predict_interval(pred),
        "regression_crepes": lambda: crepes.ConformalRegressor().fit(y - pred[:, 0]).predict_int(
            pred[:, 0], confidence=1 - ALPHA),
        "aps_ours": lambda: aps.predict_set(p_t, SplitConformal("absolute", ALPHA).fit(
            aps.score(p_t, y_t)).threshold()),
        "aps_mapie": lambda: SplitConformalClassifier(clf, 1 - ALPHA, conformity_score="aps", prefit=True)
        .conformalize(probs, labels).predict_set(probs),
    }
    row = {f"{name}_s": _best_of(fn) for name, fn in runs.items()}
    for k in ("regression_mapie", "regression_crepes", "aps_mapie"):
        row[f"{k}_over_ours"] = row[f"{k}_s"] / row[f"{k.split('_')[0]}_ours_s"]
    return row


def timing(sizes: tuple[int, ...]) -> dict:
    """Seconds to calibrate on n and predict n points (conformal layer only) and library/ours ratios."""
    from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin

    reg = type("IdReg", (_Identity, RegressorMixin, BaseEstimator), {})()
    clf = type("IdClf", (_Identity, ClassifierMixin, BaseEstimator), {})(proba=True)
    clf.classes_ = np.arange(10)
    rng = np.random.default_rng(0)
    return {str(n): _time_one(n, rng, reg, clf) for n in sizes}


def streams(t: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``name -> (y, ŷ)``: synthetic shifting streams (forecast = mean of the last 20 values) and CO2."""
    rng = np.random.default_rng(1)
    steps = np.arange(t)
    level = np.where(steps < t // 2, 0.0, 5.0) + np.where(steps >= 3 * t // 4, -8.0, 0.0)
    out = {"changepoint": level + np.where(steps < t // 2, 1.0, 3.0) * rng.normal(size=t),
           "drift": 0.002 * steps + (1 + 4 * steps / t) * rng.normal(size=t),
           "heavy_tailed": np.where((steps // 500) % 2, 10.0, 1.0) * rng.standard_t(2, size=t)}
    try:
        from statsmodels.datasets import co2

        series = co2.load_pandas().data["co2"].ffill().bfill().to_numpy()
        out["co2_weekly"] = series[-t:]
    except Exception:  # statsmodels absent: the real series is skipped, not faked
        pass
    result = {}
    for name, y in out.items():
        pred = np.concatenate([[y[0]], [y[max(0, i - 20) : i].mean() for i in range(1, len(y))]])
        if name == "co2_weekly":  # seasonal series: one-step persistence forecast
            pred = np.concatenate([[y[0]], y[:-1]])
        result[name] = (y, pred)
    return result


def _online_methods(scale: float) -> dict:
    from sciml.uq import ACI, COP, SFOGD, UPOCP, ConformalPID, QuantileTracker

    return {"ACI": ACI("absolute", ALPHA, gamma=0.005, window=100),
            "OGD": QuantileTracker("absolute", ALPHA, lr=0.05 * scale, q0=scale),
            "SF-OGD": SFOGD("absolute", ALPHA, lr=scale, q0=scale),
            "PID": ConformalPID("absolute", ALPHA, lr=0.05, q0=scale, k_i=scale, c_sat=2.0, window=100),
            "COP": COP("absolute", ALPHA, lr=0.1, q0=scale, window=100, scale0=scale),
            **{f"COP(η={lr})": COP("absolute", ALPHA, lr=lr, q0=scale, window=100, scale0=scale)
               for lr in (1.0, 0.5, 0.05)},  # the rest of the paper's grid {1, .5, .1, .05}
            "UP-OCP": UPOCP("absolute", ALPHA, q0=scale, wealth0=scale)}


def _summary(lo: np.ndarray, hi: np.ndarray, y: np.ndarray) -> dict:
    width = hi - lo
    finite = np.isfinite(width)
    return {"coverage": float(((lo <= y) & (y <= hi)).mean()), "mean_width": float(width[finite].mean()),
            "median_width": float(np.median(width)), "frac_infinite": float(1 - finite.mean())}


def online(t: int) -> dict:
    """Long-run coverage and widths of the online calibrators on every stream (burn-in: 100 steps)."""
    from sciml.uq import ACI, ResCP

    out = {}
    for name, (y, pred) in streams(t).items():
        scores = np.abs(y - pred)
        scale = float(np.quantile(scores[:100], 0.9))
        row = {}
        for method, cal in _online_methods(scale).items():
            if isinstance(cal, ACI):
                cal.fit(torch.as_tensor(scores[:100]))
            half = np.empty(len(y))
            start = time.perf_counter()
            for i, s in enumerate(scores):
                q = float(cal.threshold())
                half[i] = max(q, 0.0)
                cal.update(bool(s <= q), float(s)) if isinstance(cal, ACI) else cal.update(float(s))
            row[method] = _summary(pred[100:] - half[100:], pred[100:] + half[100:], y[100:])
            row[method]["seconds"] = time.perf_counter() - start
        band = ResCP(alpha=ALPHA).run(torch.as_tensor(pred), torch.as_tensor(y))
        row["ResCP"] = _summary(band.lower.numpy()[100:], band.upper.numpy()[100:], y[100:])
        out[name] = row
    return out


def small_sample(trials: int) -> dict:
    """SPI (RSA-CP fallback, N = 1000 reference scores: same law, or 10% too wide) vs split at m ∈ {20, 40, 80}."""
    from sciml.uq import SPIConformal, SplitConformal

    g = torch.Generator().manual_seed(5)
    out = {}
    for m in (20, 40, 80):
        rows = {"split": [], "spi_matched_reference": [], "spi_reference_10pct_wide": []}
        for _ in range(trials):
            real = torch.randn(m, generator=g, dtype=torch.float64).abs()
            ref = torch.randn(1000, generator=g, dtype=torch.float64).abs()
            test = torch.randn(2000, generator=g, dtype=torch.float64).abs()
            for name, cal in (("split", SplitConformal("absolute", ALPHA).fit(real)),
                              ("spi_matched_reference", SPIConformal("absolute", ALPHA).fit(real, ref)),
                              ("spi_reference_10pct_wide", SPIConformal("absolute", ALPHA).fit(real, 1.1 * ref))):
                q = float(cal.threshold())
                rows[name].append(((test <= q).double().mean().item(), 2 * q))
        out[str(m)] = {name: {"mean_coverage": float(np.mean([c for c, _ in r])),
                              "sd_coverage": float(np.std([c for c, _ in r])),
                              "mean_width": float(np.mean([w for _, w in r if np.isfinite(w)])),
                              "frac_infinite": float(np.mean([not np.isfinite(w) for _, w in r]))}
                       for name, r in rows.items()}
    return out


def label_cost(trials: int) -> dict:
    """Label-free stopping size vs fixed m: heteroscedastic residuals, width = 2q, cost per label c."""
    from sciml.uq import SplitConformal, stopping_size

    g = torch.Generator().manual_seed(6)

    def draw(n: int) -> torch.Tensor:
        return (0.5 + torch.rand(n, generator=g, dtype=torch.float64)) * torch.randn(n, generator=g).abs().double()

    cand = draw(20000)  # plug-in scores ε σ(x) from unlabelled points (σ known to the model)
    out = {}
    for cost in (1e-3, 1e-2):
        m_star = stopping_size(cand, lambda q: 2 * q, ALPHA, cost)
        row = {}
        for name, m in (("stopping", m_star), ("fixed_50", 50), ("fixed_200", 200), ("fixed_1000", 1000)):
            res = []
            for _ in range(trials):
                q = float(SplitConformal("absolute", ALPHA).fit(draw(m)).threshold())
                res.append(((draw(2000) <= q).double().mean().item(), 2 * q))
            width = float(np.mean([w for _, w in res]))
            row[name] = {"m": m, "coverage": float(np.mean([c for c, _ in res])), "width": width,
                         "total_cost": cost * m + width}
        best_fixed = min(row[k]["total_cost"] for k in row if k != "stopping")
        row["saving_vs_best_fixed"] = 1 - row["stopping"]["total_cost"] / best_fixed
        row["saving_vs_fixed_1000"] = 1 - row["stopping"]["total_cost"] / row["fixed_1000"]["total_cost"]
        out[f"cost={cost:g}"] = row
    return out


def active_ppi(trials: int) -> dict:
    """Active PPI of the mean perov5 heat_all: CI width and coverage vs τ (budget 10%, uncertainty = q95 - q05)."""
    import pandas as pd
    from sklearn.ensemble import HistGradientBoostingRegressor as HGB

    from sciml.uq import active_ppi_mean

    df = pd.read_csv(DATA / "perov5" / "perov5_train_pool.csv", usecols=["formula", "heat_all"])
    x, _ = element_fractions(list(df["formula"]))
    y = df["heat_all"].to_numpy()
    tr, _, te = split3(len(y), seed=1)
    f = HGB(random_state=0).fit(x[tr], y[tr]).predict(x[te])
    unc = (HGB(loss="quantile", quantile=0.95, random_state=0).fit(x[tr], y[tr]).predict(x[te])
           - HGB(loss="quantile", quantile=0.05, random_state=0).fit(x[tr], y[tr]).predict(x[te])).clip(1e-3)
    truth, g = float(y[te].mean()), torch.Generator().manual_seed(7)
    t = lambda a: torch.as_tensor(a, dtype=torch.float64)  # noqa: E731
    out = {"n": len(te), "budget": 0.1, "true_mean": truth}
    for tau in (0.0, 0.25, 0.5, 0.75, 1.0):
        res = [active_ppi_mean(t(f), t(y[te]), t(unc), 0.1, tau, ALPHA, g) for _ in range(trials)]
        out[f"tau={tau}"] = {"mean_width": float(np.mean([r.width for r in res])),
                             "coverage": float(np.mean([r.lower <= truth <= r.upper for r in res])),
                             "mean_labels": float(np.mean([r.n_labels for r in res]))}
    classical = [y[te][np.random.default_rng(i).random(len(te)) < 0.1] for i in range(trials)]
    out["classical_10pct"] = {"mean_width": float(np.mean([2 * 1.645 * c.std(ddof=1) / np.sqrt(len(c))
                                                           for c in classical]))}
    return out


def main() -> None:
    """Run every section, print it, write the JSON atomically."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "uq.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    quick = args.quick
    sections = {"offline_regression": offline_regression, "offline_classification": offline_classification,
                "fair": fair,
                "timing": lambda: timing((10_000,) if quick else (100_000, 1_000_000)),
                "online": lambda: online(600 if quick else 3000),
                "small_sample": lambda: small_sample(50 if quick else 1000),
                "label_cost": lambda: label_cost(20 if quick else 300),
                "active_ppi": lambda: active_ppi(20 if quick else 300)}
    import crepes
    import mapie

    results = {"alpha": ALPHA, "threads": 1, "python": platform.python_version(), "torch": torch.__version__,
               "mapie": mapie.__version__, "crepes": getattr(crepes, "__version__", "0.9")}
    for name, fn in sections.items():
        start = time.perf_counter()
        results[name] = fn()
        results[name + "_seconds"] = time.perf_counter() - start
        print(name, json.dumps(results[name], indent=1), flush=True)
    if not quick:
        from _results import write_json  # benchmarks/_results.py: complete runs only, atomic
        write_json(args.output, results)  # every section done: an interrupted run writes nothing
        print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
