"""``sciml hamiltonian predict --model DIR FILE.xyz... --output DIR [--alpha A] [--reference H.npy] [--plot]``.

Also ``sciml hamiltonian fit-crystal DATA --output MODEL [--network --steps N]`` (closed-form crystal model, with
``--network`` plus an equivariant network residual trained with a band-energy loss; leave-one-out conformal
band intervals) and, with such a model, ``sciml hamiltonian predict --model MODEL CRYSTAL... --output DIR
[--kpath N] [--reference DEEPH_FOLDER...] [--plot]``: structure files (CIF, POSCAR; pyscf.pbc builds H0 and S) or
DeepH folders carrying H0 and S.
"""

from __future__ import annotations

import sys

from sciml.cli.config import check_alpha_arg


def add_parser(sub, name: str) -> None:
    """Register ``hamiltonian`` and its sub-verb ``predict``."""
    p = sub.add_parser(name, help="electronic-structure Hamiltonian prediction")
    verbs = p.add_subparsers(dest="hamiltonian_verb", required=True)
    q = verbs.add_parser("predict", help="predict H, orbital energies and the HOMO-LUMO gap of molecules (.xyz, Å)")
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
    q.set_defaults(run=run_predict)
    c = verbs.add_parser("fit-crystal", help="fit the closed-form crystal model on DeepH folders (H, H0, S)")
    c.add_argument("data", help="folder holding periodic DeepH folders (sciml data hamiltonian --crystal)")
    c.add_argument("--output", required=True, help="artifact folder to write")
    c.add_argument("--lam", type=float, default=1e-6, help="ridge penalty")
    c.add_argument("--no-calibrate", action="store_true", help="skip the leave-one-out conformal band calibration")
    c.add_argument("--network", action="store_true",
                   help="also train the equivariant network residual with the band-energy loss (calibration then "
                        "retrains it per leave-one-out fold)")
    c.add_argument("--steps", type=int, default=300, help="--network: full-batch AdamW steps")
    c.add_argument("--band-weight", type=float, default=1.0, help="--network: weight of the band-energy loss term")
    c.add_argument("--seed", type=int, default=0, help="--network: seed of the initialisation")
    c.set_defaults(run=run_fit_crystal)


def run_fit_crystal(args, overrides: list[str]) -> int:
    """Fit the tensor-product ridge on every crystal under ``data``, calibrate by leave-one-out, save."""
    from sciml.hamiltonian.crystal import read_crystals
    from sciml.hamiltonian.crystal_model import fit_and_save

    if args.steps < 1 or args.band_weight < 0:
        raise ValueError(f"--steps must be >= 1 and --band-weight >= 0, got {args.steps} and {args.band_weight}")
    structures, layout = read_crystals(args.data)
    network = ({"loss": {"eig": args.band_weight}, "train": {"steps": args.steps, "seed": args.seed}}
               if args.network else None)
    info = fit_and_save(structures, layout, args.output, args.lam, calibrate=not args.no_calibrate, network=network)
    cal = "with leave-one-out band calibration" if info["calibrated"] else "no calibration"
    kind = "ridge + network" if args.network else "closed-form ridge"
    print(f"fitted {kind} on {len(structures)} crystals ({cal}); wrote {args.output}", file=sys.stderr)
    return 0


def _run_crystal(args) -> int:
    from sciml.hamiltonian.crystal_predict import predict_crystal_inputs

    for row in predict_crystal_inputs(args.inputs, args.model, args.output, args.alpha, args.kpath, args.reference,
                                      args.plot, args.threads, args.symprec):
        gap = "no gap (no virtual band)"
        if "gap_ev" in row:
            lo, hi = (f"{v:.3f}" if v is not None else s for v, s in ((row["gap_lower_ev"], "-inf"),
                                                                      (row["gap_upper_ev"], "inf")))
            gap = f"CBM {row['cbm_ev']:.3f} eV, gap {row['gap_ev']:.3f} eV [{lo}, {hi}]"
        extra = (f", occupied-band MAE vs pyscf {row['model_occupied_band_mae_mev']:.2f} meV"
                 if "model_occupied_band_mae_mev" in row else "")
        print(f"{row['source']}: VBM {row['vbm_ev']:.3f} eV, {gap}{extra} -> {row['folder']}")
    return 0


def run_predict(args, overrides: list[str]) -> int:
    """Predict every input and write its folder; print a one-line summary per molecule."""
    import torch

    from sciml.hamiltonian.predict import DEFAULT_MODEL, load_model, predict_files

    torch.set_num_threads(args.threads)
    check_alpha_arg(args.alpha)
    if args.reference is not None and len(args.reference) != len(args.inputs):
        raise ValueError(f"--reference needs one file per input ({len(args.inputs)}), got {len(args.reference)}")
    from sciml.core.io.artifact import load_artifact

    if args.model and load_artifact(args.model).config.get("task") == "hamiltonian-crystal":
        return _run_crystal(args)  # inputs are DeepH crystal folders carrying H0 and S
    predictor = load_model(args.model or DEFAULT_MODEL)
    for row in predict_files(args.inputs, predictor, args.output, args.alpha, args.reference, args.plot):
        gap = f"gap {row['gap_ev']:.3f} eV [{row['gap_lower_ev']:.3f}, {row['gap_upper_ev']:.3f}]" \
            if "gap_ev" in row else "no gap (no virtual orbital predicted)"
        print(f"{row['source']}: HOMO {row['homo_ev']:.3f} eV, {gap} -> {row['folder']}")
    print(f"wrote {len(args.inputs)} folder(s) under {args.output}; energies in eV and Hartree, "
          f"{100 * (1 - args.alpha):.0f}% conformal intervals per orbital", file=sys.stderr)
    return 0
