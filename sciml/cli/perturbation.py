"""``sciml perturbation predict`` and ``sciml perturbation calibrate``.

``predict --model DIR --control ctrl.h5ad --perturbations "A+B,C" --output pred.h5ad``;
``calibrate --model NAME_OR_DIR --operation domain|conformal [--data D] [--alpha A] [--output DIR]``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from sciml.cli.config import check_alpha_arg
from sciml.cli.feedback import infinite_interval_note, require_inputs, stage


def add_parser(sub, name: str) -> None:
    """Register ``perturbation`` and its sub-verbs ``predict`` and ``calibrate``."""
    p = sub.add_parser(name, help="single-cell perturbation response")
    verbs = p.add_subparsers(dest="perturbation_verb", required=True)
    q = verbs.add_parser("predict", help="generate perturbed cells from control cells, with effect bands")
    q.add_argument("--model", default=None, help="artifact folder (default: checkpoints/grn-default)")
    q.add_argument("--control", required=True, help=".h5ad with control cells (log1p X, or --counts-layer)")
    q.add_argument("--perturbations", required=True, help="comma-separated conditions, e.g. 'A+B,C' or 'A+ctrl'")
    q.add_argument("--n-cells", type=int, default=200, help="cells generated per condition")
    q.add_argument("--output", required=True, help=".h5ad to write (atomically)")
    q.add_argument("--plot", action="store_true", help="also write <output>_pca.png and <output>_effects.png")
    q.add_argument("--alpha", type=float, default=None, help="miscoverage of the bands (default: the model's)")
    q.add_argument("--beta", type=float, default=None,
                   help="domain flag level: a condition is out of domain when its control cells' p <= beta "
                        "(default: the model's, 0.05)")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--steps", type=int, default=None, help="ODE steps (default: the model's)")
    q.add_argument("--method", choices=["euler", "rk4"], default=None, help="ODE method (default: the model's)")
    q.add_argument("--predict-genes", default=None, help="genes of each condition the network generates, those with "
                   "the largest prior mean effect, the others moved by the prior mean: a number or 'all' (default: "
                   "the model's flow.predict_genes, 128 on panels wider than that)")
    q.add_argument("--condition-key", default=None, help="obs column marking control cells, also written to the "
                   "output with the labels as given (default: the model's)")
    q.add_argument("--control-label", default=None, help="label of control cells (default: the model's)")
    q.add_argument("--counts-layer", default=None, help="layer with raw counts (default: log1p values in X)")
    q.add_argument("--no-control", action="store_true", help="leave the control cells out of the output (default: "
                   "written after the generated cells, with the control label, for scoring with cell-eval)")
    q.add_argument("--max-control-cells", type=int, default=None, help="use at most this many control cells of the "
                   "file, a draw seeded by --seed (default: all): they pair the generated cells and are written")
    q.add_argument("--reorder-genes", action="store_true", help="select the model's genes by name in any order")
    q.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: sciml.core.threads)")
    q.set_defaults(run=run_predict)
    add_calibrate_parser(verbs)


def add_calibrate_parser(verbs) -> None:
    """Register ``perturbation calibrate`` (post-hoc operations on an artifact, :mod:`sciml.perturbation.calibrate`)."""
    c = verbs.add_parser("calibrate", help="post-hoc operations on a perturbation artifact: add its domain test, or "
                         "refit its effect bands")
    c.add_argument("--model", required=True, help="shipped model name (`sciml models`) or artifact folder; "
                   "rewritten in place unless --output is given")
    c.add_argument("--operation", required=True, choices=("domain", "conformal"),
                   help="domain: fit domain.json on the model's training controls and conditions; conformal: refit "
                        "the effect bands on its val and calib conditions")
    c.add_argument("--data", default=None, help="the model's training data (.h5ad), when not at its recorded path")
    c.add_argument("--alpha", type=float, default=None, help="conformal: miscoverage of the bands (default: the "
                   "model's)")
    c.add_argument("--output", default=None, help="write the result to this new folder; the model is unchanged")
    c.add_argument("--n-cells", type=int, default=128, help="conformal: cells generated per condition")
    c.add_argument("--seed", type=int, default=0, help="seed of the domain test's draws or the generated cells")
    c.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: sciml.core.threads)")
    c.set_defaults(run=run_calibrate)


def _check_calibrate_args(args) -> None:
    """Everything about the command line that can be wrong, before any heavy import."""
    from sciml.core.io.shipped import check_target

    check_target(args.model, args.output)
    if args.operation == "domain" and args.alpha is not None:
        raise ValueError("--alpha applies to --operation conformal; the domain test's flag level is set at "
                         "predict time (--beta)")
    check_alpha_arg(args.alpha)
    if args.n_cells < 1:
        raise ValueError(f"--n-cells must be >= 1, got {args.n_cells}")
    if args.data is not None:
        require_inputs([args.data], "file", "give the model's training data, an .h5ad file")


def run_calibrate(args, overrides: list[str]) -> int:
    """Run the operation, print what changed, write the artifact."""
    _check_calibrate_args(args)
    import torch

    from sciml.core.io.shipped import target_folder
    from sciml.perturbation.calibrate import add_domain, recalibrate

    if args.threads:
        torch.set_num_threads(args.threads)
    with target_folder(args.model, args.output) as folder:
        if args.operation == "domain":
            stage("perturbation calibrate", f"fitting domain.json of {args.model} on its training controls ...")
            domain = add_domain(folder, args.data, args.seed)
            done = (f"domain.json (k={domain.score.k}, beta={domain.score.beta:g}, {domain.score.n_calib} "
                    f"calibration control cells)")
        else:
            stage("perturbation calibrate", f"refitting the effect bands of {args.model} on its val and calib "
                  f"conditions ({args.n_cells} cells each) ...")
            rec = recalibrate(folder, args.data, args.alpha, args.n_cells, args.seed)
            print(f"test conditions: {rec['after']['n_test']}, target coverage {1 - rec['alpha']:.3f}")
            print(f"{'':8}{'coverage':>10}{'half-width':>12}")
            for name in ("before", "after"):
                row = rec[name] or {"coverage_simultaneous": float("nan"), "mean_half_width": float("nan")}
                print(f"{name:8}{row['coverage_simultaneous']:>10.3f}{row['mean_half_width']:>12.4f}")
            done = f"calibrator.json (alpha {rec['alpha']:g}, {rec['after']['n_calib']} calibration conditions)"
    print(f"wrote {done} to {args.output or folder}")
    return 0


def _check_args(args) -> None:
    if args.n_cells < 1:
        raise ValueError(f"--n-cells must be >= 1, got {args.n_cells}")
    check_alpha_arg(args.alpha)
    check_alpha_arg(args.beta, "--beta")
    if args.steps is not None and args.steps < 1:
        raise ValueError(f"--steps must be >= 1, got {args.steps}")
    if args.max_control_cells is not None and args.max_control_cells < 1:
        raise ValueError(f"--max-control-cells must be >= 1, got {args.max_control_cells}")
    if args.predict_genes is not None and args.predict_genes != "all" and (
            not args.predict_genes.isdigit() or int(args.predict_genes) < 1):
        raise ValueError(f"--predict-genes must be a number >= 1 or 'all', got {args.predict_genes!r}")
    if not str(args.output).endswith(".h5ad"):
        raise ValueError(f"--output {args.output}: expected a file name ending in .h5ad")
    require_inputs([args.control], "file", "give the path of an .h5ad AnnData file with control cells")


def run_predict(args, overrides: list[str]) -> int:
    """Generate cells, write the AnnData (and plots), print a summary per condition.

    Cheap checks (arguments, the control file exists) come before torch and anndata are imported.
    """
    _check_args(args)
    begin = time.perf_counter()
    stage("perturbation predict", "loading the model and the control cells ...", terminal_only=True)
    from sciml.core.optional import require

    require("anndata")  # a core dependency; named here rather than as "No module named 'anndata'"
    import torch

    from sciml.perturbation.artifact import DEFAULT_MODEL, load_model
    from sciml.perturbation.data.table import read_controls
    from sciml.perturbation.predict import parse_perturbations, predict_effects
    from sciml.perturbation.write import write_prediction

    if args.threads:
        torch.set_num_threads(args.threads)
    predictor = load_model(args.model or DEFAULT_MODEL)
    labels = parse_perturbations(args.perturbations)
    for label in labels:  # unknown genes fail before any work
        predictor.encode(label)
    data = predictor.data
    key = args.condition_key or data.get("condition_key", "condition")
    control_label = args.control_label or data.get("control_label", "ctrl")
    controls = read_controls(args.control, predictor.genes, key, control_label, args.counts_layer,
                             float(data.get("target_sum", 1e4)), reorder=args.reorder_genes,
                             require_key=args.condition_key is not None, max_cells=args.max_control_cells,
                             seed=args.seed)
    ctrl = controls.x
    if args.predict_genes is not None:
        predictor.module.set_flow(predict_genes=None if args.predict_genes == "all" else int(args.predict_genes))
    stage("perturbation predict", f"loaded {predictor.path} and {len(ctrl)} control cells in "
          f"{time.perf_counter() - begin:.1f} s; generating {args.n_cells} cells for each of {len(labels)} "
          f"condition(s), {torch.get_num_threads()} thread(s)")
    start = time.perf_counter()
    result = predict_effects(predictor, ctrl, labels, args.n_cells, args.seed, args.alpha, args.steps, args.method,
                             progress=True, beta=args.beta)
    seconds = time.perf_counter() - start
    info = {"model": str(predictor.path), "control_file": str(args.control), "n_control_cells": len(ctrl),
            **({"max_control_cells": args.max_control_cells} if args.max_control_cells else {}),
            "n_cells": args.n_cells, "seed": args.seed, "ode_steps": args.steps or predictor.module.flow["steps"],
            "ode_method": args.method or predictor.module.flow["method"],
            "predict_genes": predictor.module.flow["predict_genes"] or "all",
            "domain": ("control cells: k-NN conformal p-value per cell against the training controls, batch "
                       "p-value 2 x median (valid under any dependence); rules: genes and singles seen in training"
                       if predictor.domain is not None else "no domain.json: rules only (genes and singles seen in "
                       "training), no control-cell test"),
            "pairing": "each generated cell starts from one control cell drawn without replacement (with "
                       "replacement when n-cells exceeds the control cells); effect = generated mean - control mean"}
    write_prediction(result, predictor.genes, info, args.output, controls, include_controls=not args.no_control,
                     condition_key=key, control_label=control_label, given=labels, seed=args.seed)
    written = [args.output]
    if args.plot:
        from sciml.perturbation.plot import plot_cells, plot_effects

        stem = str(Path(args.output).with_suffix(""))
        written += [str(plot_cells(f"{stem}_pca.png", ctrl, result)),
                    str(plot_effects(f"{stem}_effects.png", result, predictor.genes))]
    for i, label in enumerate(result["conditions"]):
        eff = result["effect"][i]
        top = eff.__abs__().argsort()[::-1][:5]
        genes = ", ".join(f"{predictor.genes[j]} {eff[j]:+.2f}" for j in top)
        note = f"  [{result['notes'][i]}]" if result["notes"][i] else ""
        p = result["domain_pvalue"][i]
        where = ("in domain" if result["in_domain"][i] else "OUT OF DOMAIN") + ("" if p != p else f" p={p:.3g}")
        print(f"{label}: top effects {genes}; {where}{note}")
    band = (f"{100 * (1 - result['alpha']):.0f}% simultaneous bands, half-width q·σ with q={result['threshold']:.3f}"
            if predictor.bands is not None else "no calibrator in the model: bands are NaN")
    flagged = int((~result["in_domain"]).sum())
    print(f"{len(labels)} conditions x {args.n_cells} cells in {seconds:.1f} s "
          f"({len(labels) * args.n_cells / seconds:.0f} cells/s); {band}; {flagged} of {len(labels)} out of domain "
          f"(their bands carry no guarantee); wrote {', '.join(written)}", file=sys.stderr)
    if predictor.bands is not None and (note := infinite_interval_note([result["n_calib"]], result["alpha"],
                                                                        "calibration conditions")):
        print(note, file=sys.stderr)
    return 0
