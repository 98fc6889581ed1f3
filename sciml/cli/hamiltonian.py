"""``sciml hamiltonian predict`` and ``sciml hamiltonian calibrate``.

``predict --model DIR FILE... --output DIR [--alpha A] [--beta B] [--shift-aware] [--plot]``: molecule models take
``.xyz`` files (Å); crystal models (trained with ``sciml fit --config configs/hamiltonian/si-c.yaml``) take
structure files (CIF, POSCAR; pyscf.pbc builds H0 and S) or DeepH folders carrying H0 and S, and add
``[--kpath N] [--symprec S]``.
``calibrate --model DIR --operation domain|residual|refine [--data D] [--alpha A] [--output DIR]``: post-hoc
operations on a molecule artifact (:mod:`sciml.hamiltonian.calibrate`); arguments, paths and the artifact's kind are
checked before torch is imported.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from sciml.cli.config import check_alpha_arg
from sciml.cli.feedback import add_domain_arguments, infinite_interval_note, require_inputs

#: operations of ``sciml hamiltonian calibrate`` (:data:`sciml.hamiltonian.calibrate.OPERATIONS`; named here so
#: that ``--help`` needs no torch)
OPERATIONS = ("domain", "residual", "refine")


MODEL_HELP = "shipped model name (`sciml models`) or artifact folder"


def add_parser(sub, name: str) -> None:
    """Register ``hamiltonian`` and its sub-verbs ``predict`` (molecule and crystal models) and ``calibrate``."""
    p = sub.add_parser(name, help="electronic-structure Hamiltonian prediction")
    verbs = p.add_subparsers(dest="hamiltonian_verb", required=True)
    q = verbs.add_parser("predict",
                         help="predict H and orbital energies (molecules, .xyz) or H(R) and bands (crystals)")
    q.add_argument("inputs", nargs="+",
                   help=".xyz files (Å; each frame of a multi-frame file is one molecule, folder <stem>_<k>); "
                        "with a crystal model: CIF/POSCAR files or DeepH folders")
    q.add_argument("--model", default=None, help=f"{MODEL_HELP} (default: water-pbe-def2svp; molecules with C or N: "
                   "organic-pbe-def2svp)")
    q.add_argument("--output", required=True, help="output folder (one sub-folder per molecule or crystal)")
    q.add_argument("--alpha", type=float, default=0.1, help="miscoverage of the conformal intervals")
    q.add_argument("--reference", nargs="*", default=None,
                   help="reference H (.npy, pyscf AO order, Hartree; crystals: a DeepH folder with H), one per input")
    q.add_argument("--plot", action="store_true", help="draw predicted (and reference) orbital levels")
    add_domain_arguments(q, "molecule", scope="molecules: ")
    q.add_argument("--residual", action="store_true",
                   help="molecules: SCF residual |F[D(H)] - H| of each prediction (one more Fock build each, about the "
                        "cost of H0) and, when the model has residual.json, a conformal bound on its H MAE")
    q.add_argument("--refine", type=int, default=0, metavar="K",
                   help="molecules: refine each prediction by K self-consistent Fock builds, each followed by a "
                        "Newton step (the model's H0 method with XC one grid level coarser, corrected at the SAD "
                        "density; 2 bring it to the SCF solution of those builds); 0: the network's H as it is")
    q.add_argument("--batch-size", type=int, default=16, help="molecules per network call")
    q.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: sciml.core.threads)")
    q.add_argument("--kpath", type=int, default=60, help="crystals: k-points along the high-symmetry path")
    q.add_argument("--symprec", type=float, default=0.1,
                   help="crystals: symmetry tolerance (Å) for the k-path (larger: displaced cells keep the ideal one)")
    q.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    q.set_defaults(run=run_predict)
    add_calibrate_parser(verbs)


def add_calibrate_parser(verbs) -> None:
    """Register ``hamiltonian calibrate``, the post-hoc artifact operations of :mod:`sciml.hamiltonian.calibrate`."""
    c = verbs.add_parser("calibrate", help="post-hoc operations on a molecule artifact: refit its domain test, fit "
                         "the SCF-residual bound, or fit the intervals of refined predictions")
    c.add_argument("--model", required=True, help=f"{MODEL_HELP}; rewritten in place unless --output is given")
    c.add_argument("--operation", required=True, choices=OPERATIONS,
                   help="domain: domain.json and the per-orbital calibrator on the model's recorded splits; "
                        "residual: residual.json (H MAE bound of `predict --residual`) on its calibration split; "
                        "refine: refine_calibrator.json (intervals of `predict --refine K`) on --data")
    c.add_argument("--data", default=None, help="domain, residual: the training data, when moved from its recorded "
                   "path; refine: a folder of data set files of the model's calibration molecules (required)")
    c.add_argument("--alpha", type=float, default=0.1, help="miscoverage (default 0.1)")
    c.add_argument("--output", default=None, help="write the result to this new folder; the model is unchanged")
    c.add_argument("--steps", type=int, default=2, help="refine: Fock builds K of `predict --refine K` (default 2)")
    c.add_argument("--score", default="normalized", choices=("normalized", "absolute"),
                   help="domain: conformity score of the per-orbital calibrator (default normalized)")
    c.add_argument("--extra-calib", nargs="+", default=None, metavar="NPZ",
                   help="domain: data set files of new conformers that widen the declared domain")
    c.add_argument("--declared-domain", default=None,
                   help="domain: in words, which inputs the --extra-calib structures stand for (model card)")
    c.add_argument("--threads", type=int, default=None, help="torch CPU threads (sciml.core.threads)")
    c.set_defaults(run=run_calibrate)


def _interval(value: float, lower: float, upper: float, alpha: float) -> str:
    """`` [lo, hi] (90%)`` in eV, or ``± x meV`` when the interval is narrower than the printed digits."""
    if not (lower == lower and upper == upper):  # NaN: a model without a calibrator
        return ""
    if upper - lower < 0.002:
        return f" ± {500 * (upper - lower):.2g} meV ({100 * (1 - alpha):.0f}%)"
    return f" [{lower:.3f}, {upper:.3f}] ({100 * (1 - alpha):.0f}%)"


def _run_crystal(args, predictor) -> int:
    from sciml.hamiltonian.bands import predict_crystal_inputs

    for row in predict_crystal_inputs(args.inputs, predictor, args.output, args.alpha, args.kpath, args.reference,
                                      args.plot, args.threads, args.symprec, progress=not args.no_progress):
        gap, note = "no gap (no virtual band)", ""
        if "gap_ev" in row:
            gap = f"CBM {row['cbm_ev']:.3f} eV, gap {row['gap_ev']:.3f} eV"
            if row["gap_lower_ev"] is not None:
                gap += _interval(row["gap_ev"], row["gap_lower_ev"], row["gap_upper_ev"], args.alpha)
            elif row.get("gap_calibration_sizes"):
                note = infinite_interval_note(row["gap_calibration_sizes"], args.alpha, "calibration structures")
            else:
                note = "note: the model has no calibrator: no interval"
        extra = (f", occupied-band MAE vs pyscf {row['model_occupied_band_mae_mev']:.2f} meV"
                 if "model_occupied_band_mae_mev" in row else "")
        print(f"{row['source']}: VBM {row['vbm_ev']:.3f} eV, {gap}{extra} -> {row['folder']}", flush=True)
        if note:
            print(f"  gap interval infinite; {note.removeprefix('note: ')}", flush=True)
    print(f"wrote {len(args.inputs)} folder(s) under {args.output} (bands.json, deeph/"
          f"{', bands.png' if args.plot else ''}); energies in eV", file=sys.stderr)
    return 0


def run_predict(args, overrides: list[str]) -> int:
    """Predict every input and write its folder; print a one-line summary per molecule."""
    import torch

    from sciml.hamiltonian.artifact import DEFAULT_MODEL, load_model
    from sciml.hamiltonian.predict import predict_files
    from sciml.hamiltonian.units import HARTREE_EV

    torch.set_num_threads(args.threads)
    check_alpha_arg(args.alpha)
    if args.reference is not None and len(args.reference) != len(args.inputs):
        raise ValueError(f"--reference needs one file per input ({len(args.inputs)}), got {len(args.reference)}")
    check_alpha_arg(args.beta, "--beta")
    start = time.perf_counter()
    predictor = load_model(args.model or DEFAULT_MODEL)
    timings = {"load": time.perf_counter() - start}
    if predictor.periodic:
        if args.shift_aware or args.beta is not None or args.residual or args.refine:
            raise ValueError("--shift-aware, --beta, --residual and --refine apply to molecule models; crystal models "
                             "have no domain test and no SCF residual or refinement")
        return _run_crystal(args, predictor)
    if predictor.domain is None:
        print(f"note: {predictor.path} has no domain.json: whether an input resembles the training data is unknown "
              "(re-export the model, or `sciml hamiltonian calibrate --operation domain`)", file=sys.stderr)
    n_rows = n_flagged = 0
    for written in predict_files(args.inputs, predictor, args.output, args.alpha, args.reference, args.plot,
                                 progress=not args.no_progress, beta=args.beta, shift_aware=args.shift_aware,
                                 min_ess=args.min_ess, batch_size=args.batch_size, timings=timings,
                                 residual=args.residual, refine=args.refine):
        res = written.prediction
        n_rows += 1
        n_flagged += res.in_domain is False
        text, g = "no gap (no virtual orbital predicted)", res.gap
        if g is not None:
            gap, lower, upper = (v * HARTREE_EV for v in (g.gap, g.lower, g.upper))
            mark = "" if res.interval_guarantee else " (no guarantee)"
            text = f"gap {gap:.3f} eV" + _interval(gap, lower, upper, args.alpha) + (mark if lower == lower else "")
        domain = "" if res.domain_pvalue is None else f", domain p {res.domain_pvalue:.3f}"
        print(f"{res.source}: HOMO {res.homo * HARTREE_EV:.3f} eV, {text}{domain}{_residual_text(res)} -> "
              f"{written.folder}", flush=True)
        if res.note:
            print(f"  {res.note}", flush=True)
    flagged = (f"{n_flagged} of {n_rows} out of domain (intervals marked: no guarantee)" if predictor.domain
               else "domain unknown")
    print(f"wrote {n_rows} folder(s) under {args.output}; {flagged}; energies in eV and Hartree, "
          f"{100 * (1 - args.alpha):.0f}% conformal intervals per orbital"
          + (" (shift-aware)" if args.shift_aware else ""), file=sys.stderr)
    print(timing_line(timings), file=sys.stderr)
    return 0


_STAGES = (("load", "load model"), ("read", "read"), ("h0_overlap", "pyscf H0+S"), ("network", "network"),
           ("write", "write"))


def _residual_text(res) -> str:
    """The prediction's residual or refinement, for the summary line.

    ``, SCF residual 812 µHa (H MAE <= 2,030 µHa, 90%)`` for ``--residual``, ``, refined (2 Fock builds, last
    residual 31 µHa)`` for ``--refine``, else empty.
    """
    if res.refined is not None and res.refined.steps:
        return f", refined ({res.refined.steps} Fock builds, last residual {res.refined.residuals[-1]:,.0f} µHa)"
    if res.residual is None:
        return ""
    check = res.residual
    level = f", H MAE <= {check.bound:,.0f} µHa ({100 * (1 - check.alpha):.0f}%)" if check.bound is not None else ""
    return f", SCF residual {check.residual:,.0f} µHa{level}"


def timing_line(timings: dict) -> str:
    """``time: load model 0.93 s, read 0.01 s, pyscf H0+S 4.10 s, network 1.20 s (2 calls), write 0.40 s``.

    Wall seconds of model loading and of the stages of :func:`sciml.hamiltonian.predict.predict_files`; the rest
    of the command's time is Python start-up and imports. :func:`parse_timing_line` reads it back.
    """
    parts = [f"{label} {timings.get(key, 0.0):.2f} s" for key, label in _STAGES]
    parts[3] += f" ({timings.get('network_calls', 0)} calls)"
    if "residual" in timings:
        parts.append(f"SCF residual {timings['residual']:.2f} s")
    if "refine" in timings:
        parts.append(f"refine {timings['refine']:.2f} s")
    return "time: " + ", ".join(parts)


def parse_timing_line(text: str) -> dict | None:
    """The stage seconds (and ``network_calls``) of the last :func:`timing_line` in ``text``; None without one."""
    import re

    lines = [line for line in text.splitlines() if line.startswith("time: load model ")]
    if not lines:
        return None
    out = {}
    for key, label in _STAGES:
        out[key] = float(re.search(re.escape(label) + r" ([0-9.]+) s", lines[-1]).group(1))
    out["network_calls"] = int(re.search(r"\((\d+) calls\)", lines[-1]).group(1))
    for key, label in (("residual", "SCF residual"), ("refine", "refine")):
        found = re.search(r", " + label + r" ([0-9.]+) s", lines[-1])
        if found:
            out[key] = float(found.group(1))
    return out


def _check_calibrate_args(args) -> Path:
    """Check the command line, the artifact and the data paths; return the artifact folder (no torch imported)."""
    import json

    import yaml

    from sciml.core.io.shipped import check_target

    check_alpha_arg(args.alpha)
    if args.steps < 1:
        raise ValueError(f"--steps must be >= 1 Fock builds, got {args.steps}")
    if bool(args.extra_calib) != bool(args.declared_domain):
        raise ValueError("--extra-calib and --declared-domain go together: say in words which inputs the extra "
                         "calibration structures stand for (it is written to the model card)")
    if args.extra_calib and args.operation != "domain":
        raise ValueError("--extra-calib and --declared-domain apply to --operation domain")
    folder = check_target(args.model, args.output)
    meta_file = folder / "metadata.json"
    try:
        meta = json.loads(meta_file.read_text())
    except (OSError, ValueError):
        raise ValueError(f"{meta_file}: missing or unreadable; not a sciml model folder") from None
    if meta.get("task") != "hamiltonian" or meta.get("periodic"):
        raise ValueError(f"{meta_file}: not a molecule Hamiltonian model (task {meta.get('task')!r}, periodic "
                         f"{bool(meta.get('periodic'))}); calibrate operations are for molecule models")
    if args.operation == "refine":
        _check_refine_data(folder, args.data)
    elif args.data is not None:
        require_inputs([args.data], "file or folder", "give the model's training data (npz file or folder)")
    else:
        recorded = ((yaml.safe_load((folder / "config.yaml").read_text()) or {}).get("data") or {}).get("path")
        if not recorded or not Path(recorded).exists():
            raise FileNotFoundError(f"{recorded}: the training data recorded in {folder / 'config.yaml'} is not "
                                    "there; pass its location with --data")
    if args.extra_calib:
        require_inputs(args.extra_calib, "file", "give npz files of `sciml data hamiltonian`")
    return folder


def _check_refine_data(folder: Path, data: str | None) -> None:
    """``--data`` of ``--operation refine``: a folder of npz files, all of the model's calibration molecules."""
    import json

    if data is None:
        raise ValueError("--operation refine needs --data: a folder of data set files (one npz per molecule) of the "
                         "model's calibration molecules")
    require_inputs([data], "folder", "give a folder of npz files of the calibration molecules")
    files = sorted(Path(data).glob("*.npz"))
    if not files:
        raise ValueError(f"{data}: no .npz files; make the calibration molecules with `sciml data hamiltonian`")
    residual = folder / "residual.json"
    molecules = json.loads(residual.read_text()).get("molecules") if residual.is_file() else None
    if not molecules:
        raise ValueError(f"{residual}: missing or names no calibration molecules; run `sciml hamiltonian calibrate "
                         "--operation residual` first")
    outside = [f.stem for f in files if f.stem not in molecules]
    if outside:
        raise ValueError(f"{data}: {', '.join(outside)} are not calibration molecules of {folder} (those are "
                         f"{', '.join(molecules)}); calibrate on them only")


def run_calibrate(args, overrides: list[str]) -> int:
    """Run the operation on the artifact (or a copy), print what it fitted and where it wrote it."""
    _check_calibrate_args(args)
    import torch

    from sciml.cli.feedback import stage
    from sciml.core.io.shipped import target_folder
    from sciml.hamiltonian.calibrate import add_domain, add_refine_calibration, add_residual_bound

    torch.set_num_threads(args.threads)
    stage("hamiltonian calibrate", f"{args.operation} of {args.model} ...")
    with target_folder(args.model, args.output) as folder:
        if args.operation == "domain":
            m = add_domain(folder, args.data, args.alpha, args.score, extra_calib=args.extra_calib,
                           declared_domain=args.declared_domain)
            done = (f"domain.json and calibrator.json (test coverage {m['test_coverage']:.3f}, flag rate "
                    f"{m['test_flag_rate']:.3f})")
        elif args.operation == "residual":
            s = add_residual_bound(folder, args.data, args.alpha)
            done = f"residual.json (q = {s['quantile']:.3g} from {s['n_molecules']} calibration molecules)"
        else:
            s = add_refine_calibration(folder, args.data, args.steps, args.alpha)
            done = (f"refine_calibrator.json (K = {s['steps']}, median half-width {s['median_half_width_mev']:.1f} "
                    f"meV over {s['n_structures']} conformers)")
    print(f"wrote {done} to {args.output or folder}")
    return 0
