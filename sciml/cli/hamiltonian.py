"""``sciml hamiltonian predict --model DIR FILE... --output DIR [--alpha A] [--reference REF...] [--plot]``.

Molecule models take ``.xyz`` files (Å); crystal models (trained with ``sciml fit --config
configs/hamiltonian/si-c.yaml``) take structure files (CIF, POSCAR; pyscf.pbc builds H0 and S) or DeepH folders
carrying H0 and S, and add ``[--kpath N] [--symprec S]``.
"""

from __future__ import annotations

import sys

from sciml.cli.config import check_alpha_arg


def add_parser(sub, name: str) -> None:
    """Register ``hamiltonian`` and its sub-verb ``predict`` (molecule and crystal models)."""
    p = sub.add_parser(name, help="electronic-structure Hamiltonian prediction")
    verbs = p.add_subparsers(dest="hamiltonian_verb", required=True)
    q = verbs.add_parser("predict",
                         help="predict H and orbital energies (molecules, .xyz) or H(R) and bands (crystals)")
    q.add_argument("inputs", nargs="+",
                   help=".xyz files (one molecule each, Å); with a crystal model: CIF/POSCAR files or DeepH folders")
    q.add_argument("--model", default=None, help="artifact folder (default: checkpoints/water-pbe-def2svp)")
    q.add_argument("--output", required=True, help="output folder (one sub-folder per input)")
    q.add_argument("--alpha", type=float, default=0.1, help="miscoverage of the conformal intervals")
    q.add_argument("--reference", nargs="*", default=None,
                   help="reference H (.npy, pyscf AO order, Hartree; crystals: a DeepH folder with H), one per input")
    q.add_argument("--plot", action="store_true", help="draw predicted (and reference) orbital levels")
    q.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    q.add_argument("--kpath", type=int, default=60, help="crystals: k-points along the high-symmetry path")
    q.add_argument("--symprec", type=float, default=0.1,
                   help="crystals: symmetry tolerance (Å) for the k-path (larger: displaced cells keep the ideal one)")
    q.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    q.set_defaults(run=run_predict)


def interval_note(alpha: float, n: int | None, what: str) -> str:
    """One line explaining an infinite conformal interval from ``n`` calibration scores, and the smallest finite α."""
    from sciml.hamiltonian.bands import min_finite_alpha

    if not n:
        return f"{what} interval infinite: the model has no calibration scores for it"
    return (f"{what} interval infinite at alpha={alpha:g}: {n} calibration structures give a finite conformal "
            f"interval only for alpha >= 1/(n+1) = {min_finite_alpha(n):g} (ceil((n+1)(1-alpha)) <= n); "
            f"rerun with --alpha {min_finite_alpha(n):g} or calibrate on more structures")


def _run_crystal(args, predictor) -> int:
    from sciml.hamiltonian.bands import predict_crystal_inputs

    for row in predict_crystal_inputs(args.inputs, predictor, args.output, args.alpha, args.kpath, args.reference,
                                      args.plot, args.threads, args.symprec, progress=not args.no_progress):
        gap, note = "no gap (no virtual band)", ""
        if "gap_ev" in row:
            gap = f"CBM {row['cbm_ev']:.3f} eV, gap {row['gap_ev']:.3f} eV"
            if row["gap_lower_ev"] is None:
                note = interval_note(args.alpha, row.get("gap_n_calibration"), "gap")
            else:
                gap += f" [{row['gap_lower_ev']:.3f}, {row['gap_upper_ev']:.3f}]"
        extra = (f", occupied-band MAE vs pyscf {row['model_occupied_band_mae_mev']:.2f} meV"
                 if "model_occupied_band_mae_mev" in row else "")
        print(f"{row['source']}: VBM {row['vbm_ev']:.3f} eV, {gap}{extra} -> {row['folder']}")
        if note:
            print(f"  {note}")
    print(f"wrote {len(args.inputs)} folder(s) under {args.output} (bands.json, deeph/"
          f"{', bands.png' if args.plot else ''}); energies in eV", file=sys.stderr)
    return 0


def run_predict(args, overrides: list[str]) -> int:
    """Predict every input and write its folder; print a one-line summary per molecule."""
    import torch

    from sciml.hamiltonian.predict import DEFAULT_MODEL, load_model, predict_files

    torch.set_num_threads(args.threads)
    check_alpha_arg(args.alpha)
    if args.reference is not None and len(args.reference) != len(args.inputs):
        raise ValueError(f"--reference needs one file per input ({len(args.inputs)}), got {len(args.reference)}")
    predictor = load_model(args.model or DEFAULT_MODEL)
    if predictor.periodic:
        return _run_crystal(args, predictor)
    for row in predict_files(args.inputs, predictor, args.output, args.alpha, args.reference, args.plot,
                             progress=not args.no_progress):
        gap = f"gap {row['gap_ev']:.3f} eV [{row['gap_lower_ev']:.3f}, {row['gap_upper_ev']:.3f}]" \
            if "gap_ev" in row else "no gap (no virtual orbital predicted)"
        print(f"{row['source']}: HOMO {row['homo_ev']:.3f} eV, {gap} -> {row['folder']}")
    print(f"wrote {len(args.inputs)} folder(s) under {args.output}; energies in eV and Hartree, "
          f"{100 * (1 - args.alpha):.0f}% conformal intervals per orbital", file=sys.stderr)
    return 0
