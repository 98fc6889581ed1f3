"""``sciml hamiltonian predict --model DIR FILE... --output DIR [--alpha A] [--beta B] [--shift-aware] [--plot]``.

Molecule models take ``.xyz`` files (Å); crystal models (trained with ``sciml fit --config
configs/hamiltonian/si-c.yaml``) take structure files (CIF, POSCAR; pyscf.pbc builds H0 and S) or DeepH folders
carrying H0 and S, and add ``[--kpath N] [--symprec S]``.
"""

from __future__ import annotations

import sys
import time

from sciml.cli.config import check_alpha_arg
from sciml.cli.feedback import add_domain_arguments, infinite_interval_note


def add_parser(sub, name: str) -> None:
    """Register ``hamiltonian`` and its sub-verb ``predict`` (molecule and crystal models)."""
    p = sub.add_parser(name, help="electronic-structure Hamiltonian prediction")
    verbs = p.add_subparsers(dest="hamiltonian_verb", required=True)
    q = verbs.add_parser("predict",
                         help="predict H and orbital energies (molecules, .xyz) or H(R) and bands (crystals)")
    q.add_argument("inputs", nargs="+",
                   help=".xyz files (Å; each frame of a multi-frame file is one molecule, folder <stem>_<k>); "
                        "with a crystal model: CIF/POSCAR files or DeepH folders")
    q.add_argument("--model", default=None, help="artifact folder (default: checkpoints/water-pbe-def2svp)")
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
                   help="molecules: refine each prediction by K self-consistent Fock builds (Anderson mixing, the "
                        "model's H0 method with XC one grid level coarser, corrected at the SAD density; ~5 bring "
                        "it near the SCF solution); 0: the network's H as it is")
    q.add_argument("--batch-size", type=int, default=16, help="molecules per network call")
    q.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: sciml.core.threads)")
    q.add_argument("--kpath", type=int, default=60, help="crystals: k-points along the high-symmetry path")
    q.add_argument("--symprec", type=float, default=0.1,
                   help="crystals: symmetry tolerance (Å) for the k-path (larger: displaced cells keep the ideal one)")
    q.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    q.set_defaults(run=run_predict)


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
              "(re-export the model, or sciml.hamiltonian.export.add_domain)", file=sys.stderr)
    n_rows = n_flagged = 0
    for row in predict_files(args.inputs, predictor, args.output, args.alpha, args.reference, args.plot,
                             progress=not args.no_progress, beta=args.beta, shift_aware=args.shift_aware,
                             min_ess=args.min_ess, batch_size=args.batch_size, timings=timings,
                             residual=args.residual, refine=args.refine):
        n_rows += 1
        n_flagged += row["in_domain"] is False
        gap = "no gap (no virtual orbital predicted)"
        if "gap_ev" in row:
            mark = "" if row["interval_guarantee"] else " (no guarantee)"
            gap = f"gap {row['gap_ev']:.3f} eV" + _interval(row["gap_ev"], row["gap_lower_ev"], row["gap_upper_ev"],
                                                            args.alpha) + (mark if row["gap_lower_ev"] ==
                                                                           row["gap_lower_ev"] else "")
        domain = "" if row["domain_pvalue"] is None else f", domain p {row['domain_pvalue']:.3f}"
        print(f"{row['source']}: HOMO {row['homo_ev']:.3f} eV, {gap}{domain}{_residual_text(row)} -> {row['folder']}",
              flush=True)
        if row["note"]:
            print(f"  {row['note']}", flush=True)
    flagged = (f"{n_flagged} of {n_rows} out of domain (intervals marked: no guarantee)" if predictor.domain
               else "domain unknown")
    print(f"wrote {n_rows} folder(s) under {args.output}; {flagged}; energies in eV and Hartree, "
          f"{100 * (1 - args.alpha):.0f}% conformal intervals per orbital"
          + (" (shift-aware)" if args.shift_aware else ""), file=sys.stderr)
    print(timing_line(timings), file=sys.stderr)
    return 0


_STAGES = (("load", "load model"), ("read", "read"), ("h0_overlap", "pyscf H0+S"), ("network", "network"),
           ("write", "write"))


def _residual_text(row: dict) -> str:
    """The row's residual or refinement, for the summary line.

    ``, SCF residual 812 µHa (H MAE <= 2,030 µHa, 90%)`` for ``--residual``, ``, refined (5 Fock builds, last
    residual 31 µHa)`` for ``--refine``, else empty.
    """
    if row.get("refine_steps"):
        return (f", refined ({row['refine_steps']} Fock builds, last residual "
                f"{row['refine_residuals_microhartree'][-1]:,.0f} µHa)")
    if "scf_residual_microhartree" not in row:
        return ""
    bound = row["h_mae_bound_microhartree"]
    level = f", H MAE <= {bound:,.0f} µHa ({100 * (1 - row['h_mae_bound_alpha']):.0f}%)" if bound is not None else ""
    return f", SCF residual {row['scf_residual_microhartree']:,.0f} µHa{level}"


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
