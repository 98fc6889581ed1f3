"""Post-hoc operations on an exported molecule artifact (``sciml hamiltonian calibrate --operation ...``).

Three operations, none touching the weights (their ``weights_sha256`` stays valid):

- ``domain`` (:func:`add_domain`): fit ``domain.json`` and the per-orbital calibrator on the artifact's recorded
  splits, rebuilt from its training data (:mod:`sciml.hamiltonian.domain`), optionally widened by extra
  calibration files;
- ``residual`` (:func:`add_residual_bound`): fit ``residual.json``, the conformal bound on the H MAE from the SCF
  residual (:mod:`sciml.hamiltonian.scf.residual`), on the calibration split;
- ``refine`` (:func:`add_refine_calibration`): fit ``refine_calibrator.json``, the intervals of predictions refined
  by ``K`` Fock builds (:mod:`sciml.hamiltonian.scf.refine_calibration`), on data set files of the calibration
  molecules.

The artifact is rewritten atomically, in place or as a copy (:func:`sciml.core.io.shipped.target_folder`).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch

from sciml.core.io.artifact import add_extra_files, card_section, load_artifact, save_artifact, with_card_section
from sciml.hamiltonian.artifact import load_model
from sciml.hamiltonian.domain import FILE as DOMAIN_FILE
from sciml.hamiltonian.domain import pool_deep_groups
from sciml.hamiltonian.export import calibrate, chemical_domain, model_card, read_extra
from sciml.hamiltonian.module import HamiltonianModule
from sciml.hamiltonian.predict import predict_structures
from sciml.hamiltonian.refined import refine_prediction
from sciml.hamiltonian.scf.molecule import zeroth_step
from sciml.hamiltonian.scf.refine_calibration import REFINE_FILE, RefinedCalibration, core_orbitals, refined_groups
from sciml.hamiltonian.scf.residual import RESIDUAL_FILE, ResidualBound, scf_residual
from sciml.hamiltonian.sizes import KEY as TRAINING_KEY
from sciml.hamiltonian.sizes import card_lines, training_domain
from sciml.hamiltonian.task import datamodule
from sciml.hamiltonian.units import HARTREE_EV

__all__ = ["OPERATIONS", "add_domain", "add_refine_calibration", "add_residual_bound", "add_training_domain",
           "refined_errors"]

OPERATIONS = ("domain", "residual", "refine")
#: model-card sections of the extra files that depend on the weights only (kept when the domain test is refitted)
SECTIONS = {RESIDUAL_FILE: "SCF residual bound", REFINE_FILE: "Intervals of refined predictions"}


def add_domain(path: str | Path, data_path: str | None = None, alpha: float = 0.1, score: str = "normalized",
               domain: dict | None = None, extra_calib: list[str | Path] | None = None,
               declared_domain: str | None = None) -> dict:
    """Give an existing molecule artifact a domain test and per-orbital intervals without touching its weights.

    The data module is rebuilt from the artifact's recorded ``data`` section (path, split fractions and seed;
    ``data_path`` replaces a path that moved), so the train/calib/test splits are the ones it was exported
    with. ``extra_calib``: npz files of new labelled structures (e.g. ``sciml data hamiltonian ... --sigma-max
    0.10 --rotate --seed 7``) that widen the declared domain (:func:`read_extra`; split between reference and
    calibration by ``domain["extra_holdout"]``, default 0.5); ``declared_domain`` says in words what they cover
    (required with ``extra_calib``; written to the card). Rewrites ``calibrator.json``, ``domain.json``, the
    metrics in ``metadata.json`` and the card; ``weights.safetensors``, ``config.yaml`` and the other extra files
    (``residual.json``, ``refine_calibrator.json``: they depend on the weights only) are kept unchanged.
    Returns the new metrics.
    """
    art = load_artifact(path, task="hamiltonian")
    cfg = {"data": dict(art.config["data"]) | ({"path": data_path} if data_path else {})}
    dm = datamodule(cfg, None)
    if dm.periodic:
        raise ValueError(f"{path}: a crystal model; domain tests are fitted for molecule models only")
    if bool(extra_calib) != bool(declared_domain):
        raise ValueError("extra_calib and declared_domain go together: say in words which inputs the extra "
                         "calibration structures stand for (it is written to the model card)")
    module = HamiltonianModule(**art.config["module"])
    module.load_state_dict(art.state_dict, strict=True)
    extra, records = read_extra(dm, extra_calib) if extra_calib else (None, [])
    cal, metrics, dom = calibrate(module, dm, alpha, score, domain, extra)
    if extra:
        metrics |= {"declared_domain": declared_domain, "extra_calibration_files": records}
    old = dict(art.metadata.get("metrics") or {})
    metrics["previous_calibration"] = {k: old[k] for k in ("test_coverage", "test_width_mev", "test_flag_rate")
                                       if k in old}
    chemical = chemical_domain(dm)
    card = model_card(Path(path).name, dict(art.config), metrics, dm.split_sizes(), chemical)
    card += ("\n## Domain test added after training\n- `domain.json` and the per-orbital calibrator were fitted "
             "with `sciml hamiltonian calibrate --operation domain` on the splits rebuilt from the recorded data path, "
             f"fractions and seed ({dm.split_sizes()}, seed {dm.seed})"
             + (", plus the extra calibration files " + ", ".join(f"`{r['file']}` ({r['n']} structures, sha256 "
                                                                  f"{r['sha256'][:16]}…)" for r in records)
                if records else "") + "; the weights are unchanged (same sha256).\n")
    reserved = ("format_version", "versions", "weights_sha256", "extra_files")
    meta = {k: v for k, v in art.metadata.items() if k not in reserved} | {"metrics": metrics,
                                                                           TRAINING_KEY: chemical.to_dict()}
    kept = {name: content for name, content in art.extras.items() if name != DOMAIN_FILE}  # residual, refine
    old_card = (art.path / "README.md").read_text()
    for name, title in SECTIONS.items():
        body = card_section(old_card, title)
        if name in kept and body is not None:
            card = with_card_section(card, title, body)
    save_artifact(art.path, config=art.config, state_dict=art.state_dict, metadata=meta, calibrator=cal.to_dict(),
                  card=card, extras=kept | {DOMAIN_FILE: dom.to_dict()})
    if load_artifact(art.path).metadata["weights_sha256"] != art.metadata["weights_sha256"]:
        raise RuntimeError(f"{path}: rewriting changed weights.safetensors; restore it from version control")
    return metrics


def add_residual_bound(path: str | Path, data_path: str | None = None, alpha: float = 0.1) -> dict:
    """Give a molecule artifact the conformal H-MAE bound of :mod:`sciml.hamiltonian.scf.residual` (weights unchanged).

    The calib split is rebuilt from the artifact's recorded ``data`` section as in :func:`add_domain`
    (``data_path`` replaces a moved path). Every calibration conformer is predicted, its SCF residual ``r(H)`` and
    its H MAE against the reference are computed, and ``residual.json`` (per molecule the largest MAE / r ratio;
    per conformer when the split is not by molecule) is added beside the other files. Returns a summary
    (molecules, quantile, median ratio, seconds).
    """
    start = time.perf_counter()
    art, predictor = load_artifact(path, task="hamiltonian"), load_model(path)
    if predictor.periodic:
        raise ValueError(f"{path}: a crystal model; the SCF residual bound is for molecule models")
    dm = datamodule({"data": dict(art.config["data"]) | ({"path": data_path} if data_path else {})}, None)
    structures = dm.structures["calib"]
    ratios: dict[str, list[float]] = {}
    for s, res in zip(structures, predict_structures(structures, predictor, alpha=None), strict=True):
        h = predictor.layout.to_pyscf(res.hamiltonian, s.numbers)
        ref = s.to_dense("H", predictor.layout, order="pyscf")
        r = scf_residual(s.numbers, s.positions, h, predictor.basis, predictor.xc, predictor.h0, source=res.source)
        name = (str(s.meta.get("molecule")) if getattr(dm, "split_by", "") == "molecule"
                else f"{s.meta.get('source', '')}:{s.meta.get('index', len(ratios))}")
        ratios.setdefault(name, []).append(float(np.abs(h - ref).mean() * 1e6) / max(r, 1e-12))
    bound = ResidualBound.fit(ratios, alpha)
    summary = {"alpha": alpha, "n_molecules": len(bound.scores), "n_structures": len(structures),
               "quantile": bound.quantile(), "median_ratio": float(np.median([x for v in ratios.values() for x in v])),
               "seconds": round(time.perf_counter() - start, 1)}
    card = with_card_section((Path(path) / "README.md").read_text(), SECTIONS[RESIDUAL_FILE], (
        "- `sciml hamiltonian predict --residual` computes r(H) = mean |F[D(H)] − H| of "
        "each prediction (one Fock build) and bounds its H MAE by q·r(H); q = "
        f"{summary['quantile']:.3g} at α = {alpha} from {summary['n_molecules']} calibration molecules "
        f"({summary['n_structures']} conformers; per molecule the largest MAE / r ratio), fitted by "
        "`sciml hamiltonian calibrate --operation residual`; weights unchanged."))
    add_extra_files(path, {RESIDUAL_FILE: bound.to_dict()}, metadata={"residual_bound": summary}, card=card)
    return summary


def refined_errors(structures, predictor, steps: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Absolute errors, last-build changes (both Hartree) and groups of the refined orbital energies of ``structures``.

    Each structure needs its reference ``H`` and ``S`` (a data set file); H0 is rebuilt the model's way with the
    refinement's Fock builds, the network predicts, :func:`sciml.hamiltonian.refined.refine_prediction` refines.
    """
    from scipy.linalg import eigh

    from sciml.hamiltonian.scf.refine import CACHE_MB

    layout, scores, changes, groups = predictor.layout, [], [], []
    for s in structures:
        step = zeroth_step(s.numbers, s.positions, predictor.basis, predictor.xc, layout, str(s.meta.get("source")),
                           h0=predictor.h0, cache_mb=CACHE_MB)
        result = predict_structures([s], predictor, alpha=None)[0]
        refined = refine_prediction(result, s.numbers, step, layout, predictor.refined, steps, alpha=None)
        eps = refined.orbital_energies
        ref = eigh(s.to_dense("H", layout, order="pyscf"), step.overlap, eigvals_only=True)[:len(eps)]
        scores.append(torch.from_numpy(np.abs(eps - ref)))
        changes.append(torch.tensor(refined.refined.last_change, dtype=torch.float64))
        groups.append(refined_groups(len(eps), result.n_occupied, core_orbitals(s.numbers)))
    return torch.cat(scores), torch.cat(changes), torch.cat(groups)


def add_refine_calibration(path: str | Path, data: str | Path, steps: int = 2, alpha: float = 0.1) -> dict:
    """Fit and add ``refine_calibrator.json`` to a molecule artifact (weights unchanged).

    The calibrator and its score: :mod:`sciml.hamiltonian.scf.refine_calibration`. Only molecules the model was not
    trained on may calibrate it: the files' molecules must be among the artifact's calibration molecules
    (``residual.json`` lists them).

    ``data``: a folder of data set files (``sciml data hamiltonian``, one npz per molecule) of the artifact's
    calibration molecules. Returns a summary (molecules, conformers, median width in meV, seconds).
    """
    from sciml.hamiltonian.data.npz import read_npz
    from sciml.uq.mondrian import MondrianConformal

    start = time.perf_counter()
    predictor = load_model(path)
    if predictor.periodic or predictor.residual is None or not predictor.residual.molecules:
        raise ValueError(f"{path}: needs a molecule model whose residual.json names its calibration molecules "
                         "(`sciml hamiltonian calibrate --operation residual`)")
    files = sorted(Path(data).glob("*.npz"))
    if not files:
        raise ValueError(f"{data}: no .npz files; make the calibration molecules with `sciml data hamiltonian`")
    outside = [f.stem for f in files if f.stem not in predictor.residual.molecules]
    if outside:
        raise ValueError(f"{data}: {', '.join(outside)} are not calibration molecules of {path} (those are "
                         f"{', '.join(predictor.residual.molecules)}); calibrate on them only")
    structures = [s for f in files for s in read_npz(f)[0]]
    errors, changes, groups = refined_errors(structures, predictor, steps)
    groups = pool_deep_groups(groups, math.ceil(1 / alpha - 1e-9) - 1)
    floor = float(changes.abs().median())
    if not floor > 0:
        raise ValueError(f"{data}: the calibration orbitals did not change in the last of {steps} builds; "
                         "use fewer builds")
    sigma = changes.abs() + floor
    cal = MondrianConformal(score="normalized", alpha=alpha).fit(errors / sigma, groups)
    fitted = RefinedCalibration(steps, cal, [f.stem for f in files], floor, core=True)
    width = cal.threshold_or_inf(groups, alpha).double() * sigma
    summary = {"steps": steps, "method": fitted.method, "alpha": alpha, "n_molecules": len(files),
               "n_structures": len(structures),
               "median_half_width_mev": float(width.median()) * HARTREE_EV * 1e3,
               "floor_mev": floor * HARTREE_EV * 1e3,
               "seconds": round(time.perf_counter() - start, 1)}
    card = with_card_section((Path(path) / "README.md").read_text(), SECTIONS[REFINE_FILE], (
        f"- `sciml hamiltonian predict --refine {steps}` refines each "
        f"prediction by {steps} self-consistent Fock builds ({fitted.method} steps); its orbital-energy intervals "
        f"come from `{REFINE_FILE}`, Mondrian by orbital (core orbitals one group) on "
        f"|ε − ε_ref| / (|ε_K − ε_(K−1)| + {floor * HARTREE_EV * 1e3:.2f} meV) of "
        f"{len(structures)} refined conformers of {len(files)} calibration molecules (median half-width "
        f"{summary['median_half_width_mev']:.1f} meV at α = {alpha}), fitted by "
        f"`sciml hamiltonian calibrate --operation refine --steps {steps}`. Other K: the "
        "unrefined widths, marked without guarantee."))
    add_extra_files(path, {REFINE_FILE: fitted.to_dict()}, metadata={"refine_calibration": summary}, card=card)
    return summary


def add_training_domain(path: str | Path, molecules, how: str) -> dict:
    """Record the elements and sizes of an artifact's training molecules; weights and extra files unchanged.

    ``molecules``: ``(name, atomic numbers (n,))`` of every train-split structure (:mod:`sciml.hamiltonian.sizes`);
    ``how`` says in words where they came from (written to the card's ``## Chemical domain`` section). For
    artifacts exported before ``training_domain`` was recorded; new exports record it themselves.
    """
    chemical = training_domain(molecules)
    art = load_artifact(path, task="hamiltonian")
    if art.metadata.get("periodic"):
        raise ValueError(f"{path}: a crystal model; the chemical domain is recorded for molecule models")
    outside = set(chemical.elements) - {int(z) for z in art.metadata.get("elements") or []}
    if outside:
        raise ValueError(f"{path}: training molecules hold elements {sorted(outside)} outside the model's "
                         f"{art.metadata.get('elements')}; wrong molecule list")
    card = with_card_section((art.path / "README.md").read_text(), "Chemical domain",
                             "\n".join([*card_lines(chemical), f"- Recorded after training: {how}"]))
    add_extra_files(art.path, {}, metadata={TRAINING_KEY: chemical.to_dict()}, card=card)
    return chemical.to_dict()

