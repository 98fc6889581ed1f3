"""Unseen molecules: the general organic Hamiltonian model on molecules it never saw in any conformer.

For every held-out molecule (one npz per molecule, e.g. ``sciml data hamiltonian --molecule g2-holdout,md17-holdout
--n 4 --sigma 0.02 --sigma-max 0.10 --rotate --h0 fast --seed 12 --out runs/data/organic-holdout``), side by side
on the same conformers:

- ``h0``: the zeroth-step Hamiltonian itself (no model);
- ``ridge``: the closed-form tensor-product ridge alone (the model with its network read-outs zeroed);
- ``network``: the shipped model (ridge + equivariant network), with its 90% orbital-energy intervals.
- ``refine`` (with ``--refine K``): every model's prediction (``network`` is the shipped one, ``network_seedK`` the
  others), the ridge's and H0 itself, each refined by
  0…K self-consistent Fock builds (:mod:`sciml.hamiltonian.scf.refine`, what ``predict --refine`` does), H MAE and
  occupied MAE after every build: how much of the way to the SCF the network's start saves; with a refined
  calibrator in the artifact, ``predict_refine``: what ``predict --refine K`` writes for its K (intervals included);
- ``residual`` (shipped model): the SCF residual r(H) of each prediction and its conformal H MAE bound q·r(H)
  (:mod:`sciml.hamiltonian.scf.residual`; the bound needs ``residual.json`` in the artifact), its coverage on the
  held-out conformers, and the rank correlation of r(H) with the H MAE.

Per molecule: H MAE over all matrix entries (µHa), occupied orbital-energy MAE (meV), |HOMO–LUMO gap error|
(meV), interval coverage of the occupied + virtual orbitals in the target (an infinite interval covers; their share
is ``infinite_share``), domain flag rate. Each ``--model`` is
one training seed (same split, same data; the ridge is the same closed form each time); the first is the shipped
artifact. Writes key ``"organic"`` of ``benchmarks/results/hamiltonian.json`` (other keys kept); with ``--refine``
key ``"organic_refine_newton"`` instead, the refinement methods side by side (``--refine-methods anderson``:
key ``"organic_refine"``, the three-seed Anderson table).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/hamiltonian_organic.py --holdout runs/data/organic-holdout \
        --model checkpoints/organic-pbe-def2svp runs/organic-seed1-model runs/organic-seed2-model
    OMP_NUM_THREADS=1 python benchmarks/hamiltonian_organic.py --holdout runs/data/organic-holdout --refine 4
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "hamiltonian.json"
HARTREE_MEV = 27211.386245988


def module_copy(predictor):
    """A shallow copy of ``predictor`` with its own deep copy of the model, to change without touching the original."""
    out = copy.copy(predictor)
    out.module = copy.deepcopy(predictor.module)
    return out


def ridge_only(predictor):
    """A copy of ``predictor`` whose network read-outs are zero: the closed-form ridge alone predicts ΔH."""
    from sciml.hamiltonian.select import disable_network

    out = module_copy(predictor)
    disable_network(out.module)
    return out


def reference(structure, layout, n_eig: int) -> dict:
    """Reference H, H0 (e3nn order, Hartree) and the lowest ``n_eig`` orbital energies of H and of H0."""
    from scipy.linalg import eigh

    h, h0, s = (structure.to_dense(k, layout) for k in ("H", "H0", "S"))
    return {"H": h, "H0": h0, "eps": eigh(h, s, eigvals_only=True)[:n_eig],
            "eps_h0": eigh(h0, s, eigvals_only=True)[:n_eig]}


def errors(h, eps, ref: dict, n_occ: int) -> dict:
    """H MAE (µHa), occupied orbital-energy MAE (meV) and |gap error| (meV) of one prediction."""
    gap = (eps[n_occ] - eps[n_occ - 1]) - (ref["eps"][n_occ] - ref["eps"][n_occ - 1])
    return {"h_mae_microhartree": float(np.abs(h - ref["H"]).mean() * 1e6),
            "occ_mae_mev": float(np.abs(eps[:n_occ] - ref["eps"][:n_occ]).mean() * HARTREE_MEV),
            "gap_abs_error_mev": float(abs(gap) * HARTREE_MEV)}


def residual_rows(structures, results, predictor, alpha: float) -> list[dict]:
    """Per conformer: SCF residual r(H), the conformal H MAE bound q·r(H) (None without residual.json), H MAE."""
    from sciml.hamiltonian.scf.residual import check_residual, scf_residual

    rows = []
    for s, r in zip(structures, results, strict=True):
        start = time.perf_counter()
        h = predictor.layout.to_pyscf(r.hamiltonian, s.numbers)
        check = check_residual(scf_residual(s.numbers, s.positions, h, predictor.basis, predictor.xc, predictor.h0),
                               predictor.residual, alpha)
        ref = s.to_dense("H", predictor.layout)
        rows.append({"residual": check.residual, "bound": check.bound,
                     "h_mae": float(np.abs(r.hamiltonian - ref).mean() * 1e6),
                     "seconds": time.perf_counter() - start})
    return rows


def refine_curves(structures, starts: dict, predictor, steps: int, alpha: float, methods=("newton",)) -> dict:
    """Refinement curves of the predictions in ``starts`` (``{name: results}``) and of H0 itself.

    Per start and method (:data:`sciml.hamiltonian.scf.refine.METHODS`; the first under the start's name, the others
    as ``name/method``): H MAE (µHa) and occupied MAE (meV) after 0…``steps`` Fock builds, means over the conformers;
    per method the median seconds per build (its Newton step included) and the mean response products per build.
    With a refined calibrator (``refine_calibrator.json``, K builds), also what ``predict --refine K`` writes for the
    first start: coverage of its intervals, H MAE, occupied MAE, gap error.
    """
    from scipy.linalg import eigh

    from sciml.hamiltonian.refined import refine_prediction
    from sciml.hamiltonian.scf.molecule import zeroth_step
    from sciml.hamiltonian.scf.refine import CACHE_MB, refine

    layout = predictor.layout
    seconds, products = {m: [] for m in methods}, {m: [] for m in methods}
    curves, shipped = {}, []
    for i, s in enumerate(structures):
        mats = zeroth_step(s.numbers, s.positions, predictor.basis, predictor.xc, layout, h0=predictor.h0,
                           cache_mb=CACHE_MB)
        overlap, occ = mats.overlap, mats.n_occupied
        href = layout.to_pyscf(s.to_dense("H", layout), s.numbers)
        eref = eigh(href, overlap, eigvals_only=True)
        begin = {name: layout.to_pyscf(res[i].hamiltonian, s.numbers) for name, res in starts.items()}
        for name, h in (begin | {"h0": mats.h0}).items():
            for method in methods:
                start = time.perf_counter()
                out = refine(h, mats.fock, overlap, occ, steps, method, keep_history=True)  # step k = k builds
                seconds[method].append((time.perf_counter() - start) / max(steps, 1))
                products[method].append(out.products / max(steps, 1))
                row = []
                for hk in [h, *out.history]:
                    eps = eigh(hk, overlap, eigvals_only=True)[:occ]
                    row.append([float(np.abs(hk - href).mean() * 1e6),
                                float(np.abs(eps - eref[:occ]).mean() * HARTREE_MEV)])
                curves.setdefault(name if method == methods[0] else f"{name}/{method}", []).append(row)
        if predictor.refined is not None:
            first = next(iter(starts.values()))[i]
            res = refine_prediction(first, s.numbers, mats, layout, predictor.refined, predictor.refined.steps, alpha,
                                    predictor.refined.method)
            eps = res.orbital_energies
            ref = eref[:len(eps)]
            inside = (res.lower <= ref) & (ref <= res.upper)
            shipped.append(errors(layout.to_pyscf(res.hamiltonian, s.numbers), eps, {"H": href, "eps": ref}, occ)
                           | {"coverage": float(inside.mean()), "interval_guarantee": res.interval_guarantee,
                              "half_width_mev": float(np.mean(res.upper - res.lower)) / 2
                              * HARTREE_MEV})
        mats.fock.release()
    mean = {name: np.mean(rows, axis=0) for name, rows in curves.items()}
    out = {name: {"h_mae_microhartree": m[:, 0].tolist(), "occ_mae_mev": m[:, 1].tolist()}
           for name, m in mean.items()}
    out["seconds_per_build"] = {m: float(np.median(v)) for m, v in seconds.items()}
    out["response_products_per_build"] = {m: float(np.mean(v)) for m, v in products.items()}
    if shipped:
        out["predict_refine"] = {"steps": predictor.refined.steps, "method": predictor.refined.method} | {
            key: float(np.mean([r[key] for r in shipped])) for key in shipped[0]}
    return out


def score_molecule(path: Path, predictors: list, alpha: float, refine_steps: int = 0,
                   methods=("newton",)) -> dict:
    """Every method on every conformer of one held-out molecule; means over conformers."""
    from sciml.hamiltonian.data.npz import read_npz
    from sciml.hamiltonian.predict import predict_structures

    structures, _ = read_npz(path)
    layout = predictors[0].layout
    rows = {"h0": [], "ridge": []} | {f"network_seed{k}": [] for k in range(len(predictors))}
    cover, flagged = {k: [] for k in rows if k.startswith("network")}, {k: [] for k in rows if k.startswith("net")}
    infinite = {k: [] for k in cover}
    ridge_res = predict_structures(structures, ridge_only(predictors[0]), alpha=None)
    starts = {}
    for k, pred in enumerate(predictors):
        res = predict_structures(structures, pred, alpha=alpha)
        starts["network" if k == 0 else f"network_seed{k}"] = res
        for s, r in zip(structures, res, strict=True):
            eps, occ = r.orbital_energies, r.n_occupied
            ref = reference(s, layout, len(eps))
            rows[f"network_seed{k}"].append(errors(r.hamiltonian, eps, ref, occ))
            inside = (r.lower <= ref["eps"]) & (ref["eps"] <= r.upper)
            cover[f"network_seed{k}"].append(inside.mean())
            infinite[f"network_seed{k}"].append(np.isinf(r.upper).mean())
            flagged[f"network_seed{k}"].append(r.in_domain is False)
            if k == 0:
                rows["h0"].append(errors(ref["H0"], ref["eps_h0"], ref, occ))
        if k == 0:
            scf = residual_rows(structures, res, pred, alpha)
    for s, r in zip(structures, ridge_res, strict=True):
        eps = r.orbital_energies
        rows["ridge"].append(errors(r.hamiltonian, eps, reference(s, layout, len(eps)), r.n_occupied))
    out = {"n_conformers": len(structures), "n_atoms": int(len(structures[0].numbers)),
           "n_ao": int(structures[0].to_dense("S", layout).shape[0])}
    for name, rs in rows.items():
        out[name] = {key: float(np.mean([r[key] for r in rs])) for key in rs[0]}
        if name in cover:
            out[name] |= {"coverage": float(np.mean(cover[name])), "flag_rate": float(np.mean(flagged[name])),
                          "infinite_share": float(np.mean(infinite[name]))}
    bounded = [r for r in scf if r["bound"] is not None]
    out["residual"] = {"per_conformer": scf, "mean_residual_microhartree": float(np.mean([r["residual"] for r in scf])),
                       "bound_coverage": float(np.mean([r["h_mae"] <= r["bound"] for r in bounded])) if bounded
                       else None, "mean_bound_microhartree": float(np.mean([r["bound"] for r in bounded]))
                       if bounded else None}
    if refine_steps:
        out["refine"] = refine_curves(structures, starts | {"ridge": ridge_res}, predictors[0], refine_steps, alpha,
                                      methods)
    return out


def residual_summary(per_molecule: dict) -> dict:
    """The SCF-residual bound on the held-out conformers: coverage, tightness, rank correlation with the error."""
    from scipy.stats import spearmanr

    rows = [r for v in per_molecule.values() for r in v["residual"]["per_conformer"]]
    bounded = [r for r in rows if r["bound"] is not None]
    out = {"n_conformers": len(rows), "spearman_residual_vs_h_mae": float(spearmanr(
        [r["residual"] for r in rows], [r["h_mae"] for r in rows]).statistic),
        "mean_seconds_per_conformer": float(np.mean([r["seconds"] for r in rows]))}
    if bounded:
        out |= {"bound_coverage": float(np.mean([r["h_mae"] <= r["bound"] for r in bounded])),
                "molecules_fully_covered": sum(all(r["h_mae"] <= r["bound"] for r in v["residual"]["per_conformer"])
                                               for v in per_molecule.values()),
                "median_bound_over_h_mae": float(np.median([r["bound"] / r["h_mae"] for r in bounded]))}
    return out


def refine_summary(per_molecule: dict) -> dict | None:
    """Means over molecules of the refinement curves, and the fewest builds from each start that meet the bars."""
    if not all("refine" in v for v in per_molecule.values()):
        return None
    out = {}
    skip = ("seconds_per_build", "response_products_per_build", "predict_refine")
    starts = [k for k in next(iter(per_molecule.values()))["refine"] if k not in skip]
    for start in starts:
        h = np.mean([v["refine"][start]["h_mae_microhartree"] for v in per_molecule.values()], axis=0)
        occ = np.mean([v["refine"][start]["occ_mae_mev"] for v in per_molecule.values()], axis=0)
        out[start] = {"h_mae_microhartree": h.tolist(), "occ_mae_mev": occ.tolist()}
        for h_bar, occ_bar in ((150, 20), (50, 10)):
            meets = [k for k in range(len(h)) if h[k] <= h_bar and occ[k] <= occ_bar]
            out[start][f"fewest_builds_meeting_{h_bar}_microhartree_and_{occ_bar}_mev"] = meets[0] if meets else None
    rows = [v["refine"]["predict_refine"] for v in per_molecule.values() if "predict_refine" in v["refine"]]
    if rows:
        out["predict_refine"] = {key: value if isinstance(value, str) else float(np.mean([r[key] for r in rows]))
                                 for key, value in rows[0].items()}
        pr, k = out["predict_refine"], rows[0]["steps"]
        pr["done_when"] = {"mean_h_mae_le_150_microhartree": pr["h_mae_microhartree"] <= 150,
                           "occupied_mae_le_20_mev": pr["occ_mae_mev"] <= 20,
                           "mean_h_mae_le_50_microhartree": pr["h_mae_microhartree"] <= 50,
                           "occupied_mae_le_10_mev": pr["occ_mae_mev"] <= 10,
                           "coverage_in_0.85_0.95": 0.85 <= pr["coverage"] <= 0.95}
        if k < len(out["ridge"]["h_mae_microhartree"]):  # the curves reach the calibrator's K
            nets = [s for s in starts if s.startswith("network") and "/" not in s]
            pr["done_when"] |= {f"network_beats_{base}_by_30pct_at_that_k_every_seed": all(
                out[s]["h_mae_microhartree"][k] <= 0.7 * out[base]["h_mae_microhartree"][k] for s in nets)
                for base in ("ridge", "h0")}
    return out


def summarise(per_molecule: dict, n_seeds: int) -> dict:
    """Means over held-out molecules and the accuracy, coverage and network-vs-ridge checks."""
    methods = ["h0", "ridge"] + [f"network_seed{k}" for k in range(n_seeds)]
    mean = {m: {key: float(np.mean([v[m][key] for v in per_molecule.values()]))
                for key in per_molecule[next(iter(per_molecule))][m]} for m in methods}
    beats = {f"seed{k}": sum(v[f"network_seed{k}"]["h_mae_microhartree"] < v["ridge"]["h_mae_microhartree"]
                             for v in per_molecule.values()) for k in range(n_seeds)}
    net = mean["network_seed0"]
    done = {"mean_h_mae_le_150_microhartree": net["h_mae_microhartree"] <= 150,
            "occupied_mae_le_20_mev": net["occ_mae_mev"] <= 20,
            "coverage_in_0.85_0.95": 0.85 <= net["coverage"] <= 0.95,
            "network_beats_ridge_every_seed": all(mean[f"network_seed{k}"]["h_mae_microhartree"]
                                                  < mean["ridge"]["h_mae_microhartree"] for k in range(n_seeds))}
    return {"mean_over_molecules": mean, "molecules_where_network_beats_ridge": beats, "n_molecules":
            len(per_molecule), "done_when": done}


def results_key(refine: int, methods: list[str]) -> str:
    """``organic``; with refinement ``organic_refine_<first method>`` (``organic_refine``: Anderson alone)."""
    if not refine:
        return "organic"
    return "organic_refine" if methods == ["anderson"] else f"organic_refine_{methods[0]}"


def main(argv=None) -> int:
    """Score every held-out molecule with every model, print a line each, merge key ``"organic"``."""
    import torch

    from sciml.hamiltonian.artifact import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--holdout", default="runs/data/organic-holdout", help="folder of held-out molecule npz files")
    ap.add_argument("--model", nargs="+", default=["checkpoints/organic-pbe-def2svp"],
                    help="artifacts, one per training seed (the first is the shipped model)")
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--refine", type=int, default=0, metavar="K",
                    help="also refine every model's prediction, the ridge's and H0 by 0..K Fock builds (curves per "
                         "molecule)")
    ap.add_argument("--refine-methods", nargs="+", default=["newton", "newton-xc", "anderson"],
                    choices=["newton", "newton-xc", "anderson"],
                    help="how builds become steps, side by side in the run; the first is the main curve")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    start = time.perf_counter()
    predictors = [load_model(m) for m in args.model]
    files = sorted(Path(args.holdout).glob("*.npz"))
    if not files:
        raise SystemExit(f"{args.holdout} holds no .npz files; make them with the command in this script's docstring")
    per_molecule = {}
    for path in files:
        per_molecule[path.stem] = score_molecule(path, predictors, args.alpha, args.refine, args.refine_methods)
        m = per_molecule[path.stem]
        print(f"{path.stem:16s} atoms {m['n_atoms']:2d}  H MAE µHa: H0 {m['h0']['h_mae_microhartree']:9.1f}  ridge "
              f"{m['ridge']['h_mae_microhartree']:8.1f}  net {m['network_seed0']['h_mae_microhartree']:8.1f}  "
              f"occ meV: ridge {m['ridge']['occ_mae_mev']:7.1f} net {m['network_seed0']['occ_mae_mev']:7.1f}  "
              f"cov {m['network_seed0']['coverage']:.2f}  flagged {m['network_seed0']['flag_rate']:.2f}", flush=True)
    result = {"models": args.model, "holdout": str(args.holdout), "alpha": args.alpha, "threads": 1,
              "h0_method": predictors[0].h0, "per_molecule": per_molecule,
              **summarise(per_molecule, len(predictors)), "residual_bound": residual_summary(per_molecule),
              "refine": refine_summary(per_molecule),
              "seconds": round(time.perf_counter() - start, 1),
              "platform": platform.platform()}
    from sciml.core.io.atomic import atomic_write_text

    data = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}  # re-read: another script writes here
    data[results_key(args.refine, args.refine_methods)] = result
    atomic_write_text(RESULTS, json.dumps(data, indent=1) + "\n")
    print(json.dumps({"mean_over_molecules": result["mean_over_molecules"], "done_when": result["done_when"],
                      "residual_bound": result["residual_bound"], "refine": result["refine"]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
