"""The crystal section of ``benchmarks/domain.py`` (see its docstring for what is measured)."""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import torch
from pymatgen.core import Lattice, Structure
from sklearn.metrics import roc_auc_score
from torch_geometric.data import Batch

from sciml.core import keys
from sciml.crystal.artifact import load_model
from sciml.crystal.calibration import graph_structures, resolve_group_by
from sciml.crystal.data.graphs import structure_to_graph
from sciml.crystal.predict import unseen_elements
from sciml.crystal.shift import shift_thresholds
from sciml.crystal.task import datamodule
from sciml.uq import MondrianConformal, SplitConformal
from sciml.uq.groups import predict_interval, structure_groups

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "materials"
MODELS = {"perov5": ROOT / "checkpoints" / "perov5-heat-all", "carbon24": ROOT / "checkpoints" / "carbon24-energy"}
SIZE_GROUPS = {"6-8": (6, 8), "9-12": (9, 12), "13-24": (13, 24)}  # evaluation groups of the carbon24 coverage check
ALPHA = 0.1


@torch.no_grad()
def run(predictor, structures: list, batch_size: int = 64) -> dict:
    """Predictions, embeddings, domain scores, p-values and flags of ``structures`` (as ``crystal predict``)."""
    mean, sigma, emb = [], [], []
    for start in range(0, len(structures), batch_size):
        chunk = structures[start : start + batch_size]
        batch = Batch.from_data_list([structure_to_graph(s, predictor.graph, str(i)) for i, s in enumerate(chunk)])
        pred = predictor.module.predict_step(batch)
        mean.append(pred.mean.double())
        sigma.append(pred.sigma.double())
        emb.append(predictor.module.embed(batch, predictor.domain.layer).double())
    emb = torch.cat(emb)
    d = predictor.domain
    pvalue = d.pvalue(emb)
    unseen = torch.tensor([bool(unseen_elements(s, predictor)) for s in structures])
    size_out = torch.tensor([not d.size_known(len(s)) for s in structures])
    by_p = pvalue <= d.beta
    return {"mean": torch.cat(mean), "sigma": torch.cat(sigma), "emb": emb, "score": d.score.score(emb),
            "pvalue": pvalue, "by_p": by_p, "unseen": unseen, "size_out": size_out,
            "flag": by_p | unseen | size_out, "n_atoms": torch.tensor([len(s) for s in structures])}


def flag_summary(r: dict, rows: torch.Tensor | None = None) -> dict:
    """Share of ``rows`` flagged, and by which rule (a row may be flagged by several)."""
    rows = torch.ones_like(r["flag"]) if rows is None else rows
    f = lambda key: round(float(r[key][rows].float().mean()), 4)  # noqa: E731
    r = r | {"p_or_unseen": r["by_p"] | r["unseen"]}
    return {"n": int(rows.sum()), "flag_rate": f("flag"), "flagged_by_pvalue": f("by_p"),
            "unseen_elements": f("unseen"), "size_outside_training": f("size_out"),
            "flagged_without_size_rule": f("p_or_unseen")}


def auroc(positive: torch.Tensor, negative: torch.Tensor) -> float:
    """AUROC of the domain score separating ``positive`` (shifted) from ``negative`` scores."""
    y = np.r_[np.ones(len(positive)), np.zeros(len(negative))]
    return round(float(roc_auc_score(y, np.r_[positive.numpy(), negative.numpy()])), 4)


def coverage(lower, upper, y, rows=None) -> float | None:
    """Share of ``rows`` whose target lies in ``[lower, upper]`` (``None`` for no rows)."""
    rows = torch.ones_like(y, dtype=torch.bool) if rows is None else rows
    if not rows.any():
        return None
    return round(float(((y >= lower) & (y <= upper))[rows].double().mean()), 4)


def split_data(predictor, name: str) -> dict:
    """The model's recorded split rebuilt: structures and targets of calib and test."""
    import yaml

    cfg = yaml.safe_load((predictor.path / "config.yaml").read_text())
    dm = datamodule({"data": cfg["data"]})
    out = {}
    for split in ("calib", "test"):
        structures, y = [], []
        for batch in dm.loader(split):
            structures += graph_structures(batch)
            y.append(batch[keys.TARGET].double())
        out[split] = {"structures": structures, "y": torch.cat(y)}
    return out


def strained(structures: list, rng: np.random.Generator, scale: float) -> list:
    """Random symmetric strain with entries ~ N(0, scale) (the lattice and positions deform together)."""
    out = []
    for s in structures:
        e = rng.normal(scale=scale, size=(3, 3))
        out.append(Structure(Lattice(s.lattice.matrix @ (np.eye(3) + (e + e.T) / 2)), s.species, s.frac_coords))
    return out


def swapped_sites(structures: list) -> list:
    """Perovskites with the A- and B-site elements exchanged (seen elements, unseen chemistry)."""
    out = []
    for s in structures:
        species = [str(sp) for sp in s.species]
        anion = max(sorted(set(species)), key=species.count)
        cations = [e for e in dict.fromkeys(species) if e != anion]
        if len(cations) != 2:
            continue
        swap = {cations[0]: cations[1], cations[1]: cations[0]}
        out.append(Structure(s.lattice, [swap.get(e, e) for e in species], s.frac_coords))
    return out


def size_groups(n_atoms: torch.Tensor) -> dict:
    """Bool masks of the evaluation size groups :data:`SIZE_GROUPS`."""
    return {g: (n_atoms >= lo) & (n_atoms <= hi) for g, (lo, hi) in SIZE_GROUPS.items()}


def resplit_coverage(scores_all: torch.Tensor, sizes: torch.Tensor, structures: list, repeats: int, seed: int) -> dict:
    """Mondrian by size range (shipped), by size bins (>= 20 calibration structures) and one threshold, re-split.

    Size bins are chosen on each calibration half; the size range is the shipped carbon24 calibrator.

    The conformal guarantee is a probability over the calibration/test draw, so the mean over re-splits is the
    coverage estimate of each group (one recorded split of 18 structures has a binomial spread of ±0.07);
    ``n_test_mean`` is the group's mean size in the test halves.
    """
    gen = torch.Generator().manual_seed(seed)
    cov = {k: {g: [] for g in SIZE_GROUPS} for k in ("size_range", "mondrian", "single_threshold")}
    ranges = structure_groups("size_range", structures)
    n_test = {g: [] for g in SIZE_GROUPS}
    n = len(scores_all)
    for _ in range(repeats):
        perm = torch.randperm(n, generator=gen)
        cal, test = perm[: n // 2], perm[n // 2 :]
        cfg = resolve_group_by({"method": "mondrian", "group_by": "cell_size"}, [structures[i] for i in cal])
        groups = structure_groups(cfg["group_by"], structures)
        m = MondrianConformal(score="absolute", alpha=ALPHA).fit(scores_all[cal], groups[cal])
        q_m = m.threshold_or_inf(groups[test], ALPHA)
        q_s = SplitConformal(score="absolute", alpha=ALPHA).fit(scores_all[cal]).threshold(ALPHA)
        r = MondrianConformal(score="absolute", alpha=ALPHA).fit(scores_all[cal], ranges[cal])
        q_r = r.threshold_or_inf(ranges[test], ALPHA)
        for g, rows in size_groups(sizes[test]).items():
            n_test[g].append(int(rows.sum()))
            if rows.any():
                cov["size_range"][g].append(float((scores_all[test][rows] <= q_r[rows]).double().mean()))
                cov["mondrian"][g].append(float((scores_all[test][rows] <= q_m[rows]).double().mean()))
                cov["single_threshold"][g].append(float((scores_all[test][rows] <= q_s).double().mean()))
    return {k: {g: {"mean": round(float(np.mean(v)), 4), "p10": round(float(np.quantile(v, 0.1)), 4),
                    "p90": round(float(np.quantile(v, 0.9)), 4), "n_test_mean": round(float(np.mean(n_test[g])), 1)}
                for g, v in d.items() if v}
            for k, d in cov.items()} | {"repeats": repeats}


def shift_experiment(predictor, r: dict, y: torch.Tensor, structures: list, seed: int, draws: int = 20) -> dict:
    """Plain vs shift-aware coverage under covariate shift made by selection on x (labels known).

    Half of the test split is drawn with weights ``exp(2·z)``, ``z`` the standardised first principal component
    of the embeddings; ``draws`` such batches.
    """
    z = r["emb"] - r["emb"].mean(0)
    pc = torch.linalg.svd(z, full_matrices=False).Vh[0]
    t = z @ pc
    t = (t - t.mean()) / t.std()
    gen = torch.Generator().manual_seed(seed)
    plain, weighted, infinite, ess = [], [], [], []
    group_by = getattr(predictor.calibrator, "group_by", None)
    groups = structure_groups(group_by, structures) if isinstance(group_by, str) else None
    for _ in range(draws):
        idx = torch.multinomial(torch.exp(2 * t), len(t) // 2, replacement=False, generator=gen)
        lo, hi = (v[idx] for v in plain_bounds(predictor, r, structures))
        plain.append(coverage(lo, hi, y[idx]))
        res = shift_thresholds(predictor.domain, r["emb"][idx], None if groups is None else groups[idx], ALPHA)
        iv = predictor.calibrator.score_fn.predict_set(r["mean"][idx], res.thresholds, r["sigma"][idx])
        weighted.append(coverage(iv.lower, iv.upper, y[idx]))
        infinite.append(float(torch.isinf(res.thresholds).double().mean()))
        ess.append(min(res.ess.values()) if res.ess else 0.0)
    return {"draws": draws, "batch_size": len(t) // 2, "plain_coverage": round(float(np.mean(plain)), 4),
            "shift_aware_coverage": round(float(np.mean(weighted)), 4),
            "shift_aware_infinite_share": round(float(np.mean(infinite)), 4),
            "smallest_group_ess_mean": round(float(np.mean(ess)), 1)}


def plain_bounds(predictor, r: dict, structures: list):
    """Bounds of the artifact's calibrated interval (Mondrian groups from ``structures`` when it groups)."""
    iv = predict_interval(predictor.calibrator, r["mean"], r["sigma"], ALPHA, structures)
    return iv.lower, iv.upper


def model_report(name: str, predictor, others: dict, seed: int) -> dict:
    """Everything measured for one model; ``others``: shifted sets of structures by label."""
    rng = np.random.default_rng(seed)
    data = split_data(predictor, name)
    test = data["test"]
    r = run(predictor, test["structures"])
    y = test["y"]
    lo, hi = plain_bounds(predictor, r, test["structures"])
    inside = ~r["flag"]
    miss = ~((y >= lo) & (y <= hi))
    report = {
        "model": str(predictor.path.relative_to(ROOT)), "target": dict(predictor.target),
        "domain": {"layer": predictor.domain.layer, "k": predictor.domain.score.k, "beta": predictor.domain.beta,
                   "n_reference": int(predictor.domain.score.reference.shape[0]),
                   "n_calib": predictor.domain.score.n_calib, "train_sizes": list(predictor.domain.train_sizes)},
        "in_distribution": {
            "set": f"{name} test split (recorded seed), exchangeable with calib",
            **flag_summary(r), "mae": round(float((r["mean"] - y).abs().mean()), 5),
            "coverage_all_rows_baseline": coverage(lo, hi, y), "coverage_in_domain": coverage(lo, hi, y, inside),
            "mean_width": round(float((hi - lo).mean()), 5),
            "auroc_score_for_miss": auroc(r["score"][miss], r["score"][~miss]) if miss.any() else None,
            "n_miss": int(miss.sum()),
        },
        "shifted": {},
    }
    sets = dict(others)
    sets["strained_2pct"] = strained(test["structures"], rng, 0.02)
    sets["strained_5pct"] = strained(test["structures"], rng, 0.05)
    if name == "perov5":
        sets["swapped_A_B_sites"] = swapped_sites(test["structures"])
    for label, structures in sets.items():
        rs = run(predictor, structures)
        entry = flag_summary(rs) | {"auroc_vs_in_distribution": auroc(rs["score"], r["score"])}
        if label == "alignn_sample":
            not5 = rs["n_atoms"] != 5
            entry["not_5_atom_cells"] = flag_summary(rs, not5)
            entry["5_atom_cells"] = flag_summary(rs, ~not5)
        report["shifted"][label] = entry
    if predictor.target["unit"].endswith("/atom"):
        groups = size_groups(r["n_atoms"])
        cal = data["calib"]
        rc = run(predictor, cal["structures"])
        score_fn = predictor.calibrator.score_fn
        single = SplitConformal(score=score_fn.name, alpha=ALPHA).fit(score_fn.score(rc["mean"], cal["y"], rc["sigma"]))
        s_iv = single.predict_set(r["mean"], sigma=r["sigma"], alpha=ALPHA)
        report["in_distribution"]["coverage_by_size_group"] = {
            g: {"n": int(rows.sum()), "mondrian": coverage(lo, hi, y, rows),
                "mondrian_in_domain": coverage(lo, hi, y, rows & inside),
                "single_threshold_baseline": coverage(s_iv.lower, s_iv.upper, y, rows),
                "mae": round(float((r["mean"] - y).abs()[rows].mean()), 5)} for g, rows in groups.items()}
        pool = cal["structures"] + test["structures"]
        scores = torch.cat([score_fn.score(rc["mean"], cal["y"], rc["sigma"]),
                            score_fn.score(r["mean"], y, r["sigma"])])
        resplit = resplit_coverage(scores, torch.tensor([len(s) for s in pool]), pool, 200, seed)
        report["in_distribution"]["resplit_coverage_by_size_group"] = resplit
        single_split = report["in_distribution"]["coverage_by_size_group"]
        report["in_distribution"]["coverage_estimate_by_size_group"] = {
            "how": "mean over 200 random calib/test re-splits of calib ∪ test (the guarantee is a probability over "
                   "that draw); p10/p90 over the re-splits; the recorded single split beside it",
            **{g: {"estimate": v["mean"], "p10": v["p10"], "p90": v["p90"], "n_test_mean": v["n_test_mean"],
                   "recorded_test_split": single_split[g]["mondrian"], "n_recorded_test": single_split[g]["n"],
                   "cell_size_bins_estimate": resplit["mondrian"][g]["mean"],
                   "single_threshold_baseline_estimate": resplit["single_threshold"][g]["mean"]}
               for g, v in resplit["size_range"].items()}}
    report["covariate_shift_subsamples"] = shift_experiment(predictor, r, y, test["structures"], seed)
    return report


def crystal_section(args) -> dict:
    """The ``crystal`` section of ``domain.json``: a report per shipped crystal model."""
    alignn = [Structure.from_file(f) for f in sorted(glob.glob(str(DATA / "alignn_sample" / "*.vasp")))]
    models = {name: load_model(path) for name, path in MODELS.items() if (path / "metadata.json").is_file()}
    test_sets = {name: split_data(p, name)["test"]["structures"] for name, p in models.items()}
    out = {"alpha": ALPHA, "alignn_sample_files": len(alignn)}
    for name, predictor in models.items():
        others = {"alignn_sample": alignn} | {f"{o}_test_split": s for o, s in test_sets.items() if o != name}
        out[name] = model_report(name, predictor, others, args.seed)
    out["done_when"] = done_when(out)
    return out


def done_when(out: dict) -> dict:
    """The crystal domain and coverage checks, each with the measured value and whether it holds."""
    checks = {}
    if "perov5" in out:
        p = out["perov5"]
        checks["perov5: >= 90% of alignn_sample non-5-atom cells flagged"] = p["shifted"]["alignn_sample"][
            "not_5_atom_cells"]["flag_rate"]
        checks["perov5: <= 10% of the exchangeable test split flagged"] = p["in_distribution"]["flag_rate"]
        checks["perov5: in-domain 90% coverage in [0.85, 0.95]"] = p["in_distribution"]["coverage_in_domain"]
    if "carbon24" in out:
        c = out["carbon24"]["in_distribution"]
        checks["carbon24: test MAE below 0.0149 eV/atom"] = c["mae"]
        for g, v in c["coverage_estimate_by_size_group"].items():
            if g != "how":  # the estimate is the re-split mean; the recorded split is reported beside it
                checks[f"carbon24: 90% coverage in [0.85, 0.95], {g} atoms (mean over 200 calib/test re-splits)"] = v
    holds = {
        ">= 90%": lambda v: v >= 0.9, "<= 10%": lambda v: v <= 0.1, "below 0.0149": lambda v: v < 0.0149,
        "[0.85, 0.95]": lambda v: v is not None and 0.85 <= v <= 0.95,
    }
    out = {}
    for line, v in checks.items():
        detail = v if isinstance(v, dict) else {}
        value = detail.get("estimate", v)
        out[line] = {"value": value, "holds": next(f(value) for key, f in holds.items() if key in line)} | {
            k: detail[k] for k in ("p10", "p90", "recorded_test_split", "n_recorded_test") if k in detail}
    return out
