"""Evaluate a Hamiltonian module on a split and export it as a calibrated artifact (docs/design.md §4).

Molecules (docs/hamiltonian.md): the errors of :mod:`sciml.hamiltonian.evaluate` on the test split; split
conformal on orbital energies.
Crystals: H MAE over blocks (µHa) and occupied-band MAE (meV) against pyscf's bands at the generator's off-mesh
check k-points, for the model and for H0; per-band (Mondrian) conformal scores ``max_k |ε_b − ε_b^pyscf|`` on the
calibration split (:mod:`sciml.hamiltonian.bands`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from sciml.core.io.artifact import save_artifact
from sciml.hamiltonian.domain import FILE as DOMAIN_FILE
from sciml.hamiltonian.domain import (
    HamiltonianDomain,
    fit_domain,
    orbital_counts,
    orbital_groups,
    pool_deep_groups,
    split_errors,
)
from sciml.hamiltonian.evaluate import evaluate, summarise
from sciml.hamiltonian.module import HamiltonianModule
from sciml.hamiltonian.sizes import KEY as TRAINING_KEY
from sciml.hamiltonian.sizes import TrainingDomain, card_lines, training_domain
from sciml.hamiltonian.units import HARTREE_MEV
from sciml.uq import MondrianConformal, mean_width


def calibrate(module: HamiltonianModule, dm, alpha: float = 0.1, score: str = "normalized",
              domain: dict | None = None, extra: list | None = None
              ) -> tuple[MondrianConformal, dict[str, float], HamiltonianDomain]:
    """Domain test and per-orbital conformal intervals of a molecule model (:mod:`sciml.hamiltonian.domain`).

    The calibrator is Mondrian by orbital (HOMO −1, LUMO 0, ...) on the normalised score ``|ε − ε̂|/σ(x)`` of
    the calib split, ``σ(x) = 1 + (s(x)/s̃)^γ`` from the domain test's k-NN distance (``score="absolute"``:
    ``γ = 0``, one width per orbital). ``domain``: keyword arguments of
    :func:`~sciml.hamiltonian.domain.fit_domain`; ``extra``: featurised structures widening the declared domain
    (:func:`read_extra`; a held-out part of them joins the calib split). Metrics: the test split's errors
    (:func:`summarise`), the coverage and mean width of its intervals, its domain flag rate at ``β``, and the
    coverage of its unflagged structures.
    """
    if score not in ("normalized", "absolute"):
        raise ValueError(f"calibration.score {score!r}: molecule models calibrate 'normalized' (widths scale with "
                         "the domain distance) or 'absolute' (one width per orbital)")
    settings = dict(domain or {})
    if score == "absolute":
        settings["sigma_power"] = 0.0
    dom = fit_domain(module, dm, extra=extra, **settings)
    dom.shift_groups = pool_deep_groups(dom.shift_groups, math.ceil(1 / alpha - 1e-9) - 1)
    cal = MondrianConformal(score="normalized", alpha=alpha).fit(dom.shift_scores, dom.shift_groups)
    emb, eps, y = split_errors(module, dm.datasets["test"], dm.collate_fn)
    n_eig, n_occ = orbital_counts(dm.datasets["test"])
    rows = torch.repeat_interleave(torch.arange(len(emb)), n_eig)
    interval = cal.predict_set(eps, orbital_groups(n_eig, n_occ, cal.group_ids), dom.sigma(emb)[rows], alpha)
    covered = ((y >= interval.lower) & (y <= interval.upper)).double()
    flagged = dom.pvalue(emb) <= dom.beta
    metrics = {"test_coverage": float(covered.mean()),
               "test_width_mev": float(mean_width(interval)) * HARTREE_MEV, "alpha": alpha,
               "n_calib_orbitals": len(dom.shift_scores), "calibration": f"mondrian by orbital, {score}",
               "sigma_power": dom.sigma_power, "domain_beta": dom.beta,
               "test_flag_rate": float(flagged.double().mean()),
               "test_in_domain_coverage": float(covered[~flagged[rows]].mean()) if (~flagged).any() else float("nan"),
               "n_domain_reference": int(dom.score.reference.shape[0]), "n_domain_calib": dom.score.n_calib,
               "n_interval_calib_structures": len(dom.shift_emb)}
    if extra:
        n_x = len(dom.shift_emb) - len(dm.datasets["calib"])
        metrics |= {"n_extra_calib": n_x, "n_extra_reference": len(extra) - n_x}
    return cal, metrics | summarise(evaluate(module, dm.test_dataloader())), dom


def read_extra(dm, paths) -> tuple[list[dict], list[dict]]:
    """Featurised structures of the npz files ``paths`` for :func:`calibrate`'s ``extra``, checked against ``dm``.

    Every file must hold the training data's elements, orbital layout, basis, functional and H0 method, and no
    conformer of the training data set itself (same positions to 1e-6 Å): extra calibration structures must be
    new to the model, or their errors are not honest. Returns the samples and one record per file (name, sha256,
    number of structures).
    """
    from sciml.core.io.checksum import sha256_file
    from sciml.hamiltonian.data.npz import read_npz

    seen = {_position_key(x["pos"]) for split in dm.datasets.values() for x in split}
    samples, records = [], []
    for path in map(Path, paths):
        structures, layout = read_npz(path)
        for key in ("basis", "xc", "h0"):
            theirs = {str(st.meta.get(key, "full" if key == "h0" else None)) for st in structures}
            if theirs != {str(dm.meta.get(key))}:
                raise ValueError(f"{path}: {key} {', '.join(sorted(theirs))} but the model was trained on "
                                 f"{dm.meta.get(key)}; generate the extra calibration data at the training level")
        for z in layout.elements():
            if z not in dm.layout.elements() or layout.irreps(z) != dm.layout.irreps(z):
                raise ValueError(f"{path}: element {z} (orbitals {layout.irreps(z)}) is outside the trained orbital "
                                 f"basis {dm.layout.to_dict()}; extra calibration data must be of the trained kind")
        part = [dm.sample(st) for st in structures]
        dup = sum(_position_key(x["pos"]) in seen for x in part)
        if dup:
            raise ValueError(f"{path}: {dup} conformer(s) are in the training data set {dm.path}; extra calibration "
                             "data must be new conformers (generate them with another --seed)")
        samples += part
        records.append({"file": path.name, "sha256": sha256_file(path), "n": len(part)})
    if not samples:
        raise ValueError(f"no structures in {', '.join(map(str, paths))}")
    return samples, records


def _position_key(pos: torch.Tensor) -> bytes:
    return np.round(pos.double().numpy() * 1e6).astype(np.int64).tobytes()


def chemical_domain(dm) -> TrainingDomain:
    """Elements and sizes of the train split of a (set-up) molecule data module (:mod:`sciml.hamiltonian.sizes`)."""
    return training_domain((str(s.meta.get("molecule", Path(dm.path).stem)), s.numbers)
                           for s in dm.structures["train"])


def crystal_scores(predictor, structures) -> tuple[dict[str, float], torch.Tensor, torch.Tensor]:
    """Mean crystal errors over ``structures``, per-band scores and their band indices.

    Errors of :func:`~sciml.hamiltonian.periodic.crystal_errors`; scores ``max_k |ε_b(k) − ε_b^pyscf(k)|``
    (Hartree) at the check k-points, and band indices, both ``(n_structures · n_bands,)``.
    """
    from sciml.hamiltonian.bands import predict_crystal
    from sciml.hamiltonian.periodic import crystal_errors, structure_bands

    errors, scores, groups = [], [], []
    for s in structures:
        if "check_bands" not in s.meta:
            raise ValueError(f"{s.meta.get('source')}: no check_bands in info.json meta; regenerate the data with "
                             "`sciml data hamiltonian --crystal`")
        pred = predict_crystal(s, predictor)
        errors.append(crystal_errors(pred, s, predictor.layout))
        bands = structure_bands(pred, predictor.layout, s.meta["check_kpts"])
        err = np.abs(bands - np.asarray(s.meta["check_bands"]))
        scores.append(torch.from_numpy(err.max(axis=0)))
        groups.append(torch.arange(err.shape[1]))
    keys = set.intersection(*(set(e) for e in errors)) if errors else set()
    mean = {k: float(np.mean([e[k] for e in errors])) for k in sorted(keys)} | {"n_structures": len(structures)}
    return mean, torch.cat(scores) if scores else torch.zeros(0), torch.cat(groups) if groups else torch.zeros(0)


def calibrate_crystals(module: HamiltonianModule, dm, alpha: float = 0.1):
    """Per-band Mondrian conformal on the calib split; test-split errors and the band coverage of its intervals."""
    from sciml.hamiltonian.artifact import HamiltonianPredictor
    from sciml.uq.mondrian import MondrianConformal

    meta = module.meta
    predictor = HamiltonianPredictor(module.eval(), None, module.layout, str(meta.get("basis")), str(meta.get("xc")),
                                     Path("."), True, dict(meta.get("generator") or {}))
    _, cal_scores, cal_groups = crystal_scores(predictor, dm.structures["calib"])
    if len(cal_scores) == 0:
        raise ValueError(f"data.path {dm.path}: the calib split is empty ({dm.split_sizes()}); conformal band "
                         "intervals need calibration crystals (change data.split.fractions, or export without "
                         "--calibrate)")
    cal = MondrianConformal(score="absolute", alpha=alpha).fit(cal_scores, cal_groups)
    metrics, test_scores, test_groups = crystal_scores(predictor, dm.structures["test"])
    metrics |= {"alpha": alpha, "n_calib_structures": len(dm.structures["calib"])}
    if len(test_scores):
        q = cal.threshold_or_inf(test_groups, alpha)
        metrics["test_band_coverage"] = float((test_scores <= q).double().mean())
    return cal, metrics


MANY_MOLECULES = ("closed-shell molecules of the trained elements like the training molecules (listed in the run's "
                  "split.json), geometries displaced from near-equilibrium ones as in the training data; the domain "
                  "test compares H0 inputs and can miss a chemically different molecule whose prediction is poor: "
                  "`sciml hamiltonian predict --residual` bounds the error of each prediction")


def _network_line(m: dict) -> list[str]:
    c = m.get("network_check") or {}
    if "val_h_mae_ridge" not in c:
        return []
    verdict = ("used: it beats the ridge alone" if c["network_used"] else
               "NOT used (read-outs zeroed): it did not beat the ridge alone, so the model predicts with the "
               "closed-form ridge")
    return [f"- Network {verdict} on the val split (H MAE {c['val_h_mae_network']:.4g} µHa with it, "
            f"{c['val_h_mae_ridge']:.4g} µHa ridge alone, {c['n_val']} structures)"]


def _symbols(layout: dict) -> list[str]:
    from pymatgen.core import Element

    return [Element.from_Z(int(z)).symbol for z in sorted(layout, key=int)]


def model_card(name: str, cfg: dict, metrics: dict, sizes: dict, training: TrainingDomain | None = None) -> str:
    """Markdown model card: data, split, metrics, chemical domain (``training``), intended use, limits."""
    meta = cfg["module"].get("meta") or {}
    m = metrics
    chemical = ["", "## Chemical domain", *card_lines(training)] if training is not None else []
    return "\n".join([
        f"# {name}", "", f"E(3)-equivariant Hamiltonian model (NextHAM-style ΔH = H − H0 correction; "
        f"use_h0={cfg['module']['network'].get('use_h0', True)}; closed-form tensor-product ridge base: "
        f"{'yes' if cfg['module'].get('ridge') else 'no'}) for {meta.get('xc')}/{meta.get('basis')}. "
        "Outputs: H (e3nn order inside, pyscf order in `hamiltonian.npy`), orbital energies with split-conformal "
        "intervals.", "",
        "## Data", f"- `{cfg['data']['path']}`, seeded split {sizes} (seed {cfg['data'].get('split', {}).get('seed')})",
        "", "## Metrics on the test split",
        f"- H MAE {m['h_mae_microhartree']:.3g} µHa (gauge-corrected {m['gauge_mae_microhartree']:.3g} µHa)",
        f"- occupied orbital energy MAE {m['occupied_energy_mae_mev']:.3g} meV, HOMO–LUMO gap MAE "
        f"{m['gap_mae_mev']:.3g} meV, occupied-orbital cosine {m['occupied_cosine_percent']:.3f} %",
        f"- {100 * (1 - m['alpha']):.0f}% conformal intervals on orbital energies: coverage {m['test_coverage']:.3f}, "
        f"mean width {m['test_width_mev']:.3g} meV"
        + (f" ({m['calibration']}, σ(x) = 1 + (s(x)/s̃)^{m['sigma_power']:g})" if "calibration" in m else ""),
        *_network_line(m), *_domain_lines(m), *chemical, "", "## Intended use and limits",
        f"- Molecules made of the trained elements {', '.join(_symbols(cfg['module']['layout']))}, same basis "
        "set; " + (f"declared domain: {m['declared_domain']}" if m.get("declared_domain") else
                   "geometries close to the training conformers (random displacements, σ = 0.05 Å, of one "
                   "near-equilibrium geometry)") + ": no guarantee for other molecules or geometries outside it.",
        "- Prediction needs pyscf (quantum extra) for S and H0 of new geometries.",
        "- Intervals are split-conformal per orbital for structures exchangeable with the calibration set; a "
        "structure flagged out of domain (`in_domain: false`) carries no guarantee.", ""])


def _domain_lines(m: dict) -> list[str]:
    if "domain_beta" not in m:
        return []
    if "n_extra_calib" in m:
        x_ref, x_cal = m["n_extra_reference"], m["n_extra_calib"]
        sources = (f"reference coreset of {m['n_domain_reference']} structures ({m['n_domain_reference'] - x_ref} "
                   f"train + {x_ref} extra), calibrated on {m['n_domain_calib']} held-out structures "
                   f"({m['n_domain_calib'] - x_cal} train + calib, {x_cal} extra; the intervals on "
                   f"{m['n_interval_calib_structures']}: calib + extra)")
        exch = ("an input drawn like the calibration structures, a mixture of training-like and extra ones, is "
                "flagged with probability ≤ β")
    else:
        sources = (f"reference coreset of {m['n_domain_reference']} train structures, calibrated on "
                   f"{m['n_domain_calib']} held-out train + calib structures")
        exch = "an exchangeable structure is flagged with probability ≤ β"
    test = "unseen molecules" if m.get("declared_domain") == MANY_MOLECULES else "training-like"
    return ["", "## Applicability domain (`domain.json`)",
            f"- k-NN conformal novelty test on whitened invariant H0 features (pooled l = 0 irreps): {sources}; flag "
            f"level β = {m['domain_beta']:g} ({exch}). Test split ({test}): {100 * m['test_flag_rate']:.1f}% "
            f"flagged, in-domain coverage {m['test_in_domain_coverage']:.3f}."]


def crystal_card(name: str, cfg: dict, metrics: dict, sizes: dict) -> str:
    """Markdown model card of a crystal model: data, split, metrics, intended use, limits."""
    meta = cfg["module"].get("meta") or {}
    m = metrics
    lines = [f"# {name}", "", "E(3)-equivariant crystal Hamiltonian model: closed-form tensor-product ridge on H0(R) "
             "blocks plus an equivariant network residual trained with a band-energy loss (Lightning), "
             f"{meta.get('xc')}/{meta.get('basis')} ({(meta.get('generator') or {}).get('pseudo')}). Predicts H(R) of "
             "crystals from structure files (pyscf.pbc builds H0 and S with the stored generator settings) or DeepH "
             "folders carrying H0 and S; bands with per-band split-conformal intervals.", "",
             "## Data", f"- `{cfg['data']['path']}`, seeded split {sizes} (seed "
             f"{cfg['data'].get('split', {}).get('seed')}); generator {meta.get('generator')}", "",
             "## Metrics on the test split"]
    if "model_occupied_band_mae_mev" in m:
        lines.append(f"- occupied-band MAE vs pyscf {m['model_occupied_band_mae_mev']:.3g} meV (H0: "
                     f"{m['h0_occupied_band_mae_mev']:.3g} meV) over {m['n_structures']} structures")
    if "test_band_coverage" in m:
        lines.append(f"- {100 * (1 - m['alpha']):.0f}% per-band intervals: coverage {m['test_band_coverage']:.3f} "
                     f"({m['n_calib_structures']} calibration structures; infinite for alpha < "
                     f"1/{m['n_calib_structures'] + 1})")
    lines += ["", "## Intended use and limits",
              f"- Crystals of the trained elements {', '.join(_symbols(cfg['module']['layout']))}, same basis and "
              "pseudopotential, geometries close to the training ones (small displacements of the ideal cell).",
              "- Prediction needs pyscf (quantum extra) for H0 and S of structure files.", ""]
    return "\n".join(lines)


def export(ckpt: str | Path, state: dict, output: str | Path, cfg: dict, calibrate_: bool = True,
           alpha: float = 0.1, score: str | None = None) -> dict:
    """Export the checkpoint ``ckpt`` (already loaded as ``state``) of a Hamiltonian run to ``output``.

    Molecule models also get ``domain.json`` (:mod:`sciml.hamiltonian.domain`; settings from
    ``calibration.domain``) and a per-orbital calibrator on the ``normalized`` score unless ``score`` says
    ``absolute``; the training callback's ``calibration.score`` is not used for them.
    """
    from sciml.hamiltonian.task import datamodule

    hparams = dict(state["hyper_parameters"])
    module = HamiltonianModule(**hparams)
    module.load_state_dict(state["state_dict"], strict=True)
    dm = datamodule(cfg, None)
    extras, chemical = {}, None
    if dm.periodic:
        cal, metrics = calibrate_crystals(module, dm, alpha)
    else:
        chemical = chemical_domain(dm)
        from sciml.hamiltonian.select import network_check

        check = network_check(module, dm)  # before calibration: the intervals are those of what is shipped
        cal, metrics, dom = calibrate(module, dm, alpha, score or "normalized",
                                      (cfg.get("calibration") or {}).get("domain"))
        metrics["network_check"] = check
        if dm.folder:
            metrics.setdefault("declared_domain", MANY_MOLECULES)
        extras[DOMAIN_FILE] = dom.to_dict()
    art_cfg = {"task": "hamiltonian", "module": hparams, "data": cfg["data"]}
    target = ({"name": "band_energies", "unit": "hartree"} if dm.periodic else
              {"name": "orbital_energies", "unit": "hartree"})
    metadata = {"task": "hamiltonian", "target": target, "periodic": dm.periodic,
                "elements": module.layout.elements(), "layout": module.layout.to_dict(),
                "basis": hparams["meta"].get("basis"), "xc": hparams["meta"].get("xc"),
                "split_sizes": dm.split_sizes(), "metrics": metrics, "source_checkpoint": Path(ckpt).name}
    if chemical is not None:
        metadata[TRAINING_KEY] = chemical.to_dict()
        card = model_card(Path(output).name, art_cfg, metrics, dm.split_sizes(), chemical)
    else:
        card = crystal_card(Path(output).name, art_cfg, metrics, dm.split_sizes())
    save_artifact(output, config=art_cfg, state_dict=module.state_dict(), metadata=metadata,
                  calibrator=cal.to_dict() if calibrate_ else None, card=card, extras=extras if calibrate_ else None)
    return metrics
