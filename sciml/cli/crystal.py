"""``sciml crystal predict``, ``sciml crystal calibrate`` and ``sciml crystal ensemble``.

``predict --model NAME_OR_DIR FILE_OR_DIR... [--alpha A] [--beta B] [--shift-aware] --output preds.csv``;
``calibrate --model NAME_OR_DIR --operation conformal|domain [--data D] [--alpha A] [--output DIR]``;
``ensemble MODEL MODEL... --output FILE.ckpt [--overwrite]``.
Arguments, input paths and the model name are checked before torch and pymatgen are imported.
"""

from __future__ import annotations

import sys
import time

from sciml.cli.config import check_alpha_arg
from sciml.cli.feedback import (
    add_domain_arguments,
    calibration_sizes,
    infinite_interval_note,
    predict_exit_code,
    require_inputs,
    stage,
)

INPUTS = "give structure files (CIF, POSCAR, extxyz, json), folders of them, or CSV files with a 'cif' column"
MODEL_HELP = "shipped model name (`sciml models`) or artifact folder"
#: group functions of crystal models (registered by :mod:`sciml.crystal.calibration`; named here so that
#: ``--help`` needs no torch; ``tests/integration/test_startup.py`` checks that the two agree)
GROUP_NAMES = ("anion", "crystal_system")
#: terminal columns (file column names; ``alpha`` is in the summary line, ``note``/``error`` shown when set)
NOTE_WIDTH = 60  # characters of note/error shown in the terminal
SHOWN = ("source", "formula", "n_atoms", "{t}", "{t}_lower", "{t}_upper", "domain_pvalue", "in_domain")


def add_parser(sub, name: str) -> None:
    """Register ``crystal`` and its sub-verbs ``predict``, ``calibrate`` and ``ensemble``."""
    p = sub.add_parser(name, help="crystal property prediction")
    verbs = p.add_subparsers(dest="crystal_verb", required=True)
    q = verbs.add_parser("predict", help="predict from structure files (CIF, POSCAR, extxyz, json, folders, CSV)")
    q.add_argument("inputs", nargs="+", help="structure files, folders, or CSV files with a 'cif' column")
    q.add_argument("--model", default=None, help=f"{MODEL_HELP} (default: mp-formation-energy)")
    q.add_argument("--alpha", type=float, default=0.1, help="miscoverage of the conformal interval")
    q.add_argument("--output", default=None, help="CSV to write (atomically); printed when omitted")
    add_domain_arguments(q, "structure")
    q.add_argument("--batch-size", type=int, default=64)
    q.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: OMP_NUM_THREADS, else "
                   "the cores not busy; sciml.core.threads)")
    q.set_defaults(run=run_predict)
    add_calibrate_parser(verbs)
    e = verbs.add_parser("ensemble", help="join trained models of one config into a mean ensemble checkpoint "
                         "(then: sciml export --ckpt FILE --config CONFIG --calibrate --output DIR)")
    e.add_argument("members", nargs="+", help="at least two models: artifact folders, shipped names or .ckpt files")
    e.add_argument("--output", required=True, help="checkpoint file to write (atomically)")
    e.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    e.set_defaults(run=run_ensemble)


def run_ensemble(args, overrides: list[str]) -> int:
    """Write the ensemble checkpoint and say what it holds and what to run next."""
    from sciml.cli.export import check_output

    check_output(args.output, args.overwrite)
    from sciml.crystal.ensemble import assemble

    state = assemble(args.members, args.output)
    network = state["hyper_parameters"]["network"]
    stage("crystal ensemble", f"wrote {args.output}: mean of {len(network['members'])} "
          f"{'/'.join(sorted({m['name'] for m in network['members']}))} networks; calibrate it with "
          f"`sciml export --ckpt {args.output} --config CONFIG --calibrate --output DIR`")
    return 0


def add_calibrate_parser(verbs) -> None:
    """Register ``crystal calibrate`` (post-hoc operations on an artifact, :mod:`sciml.crystal.calibrate`)."""
    c = verbs.add_parser("calibrate", help="post-hoc operations on a crystal artifact: refit the conformal "
                         "calibrator on new labelled data, or add its domain test")
    c.add_argument("--model", required=True, help=f"{MODEL_HELP}; rewritten in place unless --output is given")
    c.add_argument("--operation", default="conformal", choices=("conformal", "domain"),
                   help="conformal: refit the calibrator on --data (default); domain: fit domain.json on the "
                        "model's recorded train/calib split (--data: where its training data is now)")
    c.add_argument("--data", default=None, help="conformal: CSV with a cif column and the target column, or a "
                   "folder with id_prop.csv (required); domain: the training data, when moved")
    c.add_argument("--output", default=None, help="write the result to this new folder; the model is unchanged")
    c.add_argument("--alpha", type=float, default=0.1, help="conformal: miscoverage (default 0.1)")
    c.add_argument("--method", default="split", choices=("split", "mondrian", "multigroup", "conditional"),
                   help="conformal: calibrator to fit (default split)")
    c.add_argument("--score", default=None, choices=("absolute", "normalized"),
                   help="conformal: conformity score (default: the artifact's, else absolute)")
    c.add_argument("--group-by", default=None,
                   help=f"conformal: group function(s) {list(GROUP_NAMES)}: one for --method mondrian (default "
                   "crystal_system), comma-separated for multigroup (default crystal_system,anion)")
    c.add_argument("--target", default=None, help="conformal: target column of a CSV (default: the model's)")
    c.add_argument("--holdout", type=float, default=0.5, help="conformal: fraction held out to measure coverage")
    c.add_argument("--seed", type=int, default=0, help="seed of the held-out split (conformal) or the domain "
                   "test's draws (domain)")
    c.add_argument("--threads", type=int, default=None, help="torch CPU threads (sciml.core.threads)")
    c.set_defaults(run=run_calibrate)


def display_table(head: list[dict], target: str):
    """The printed rows: the file's columns (:data:`SHOWN`, plus ``note`` and ``error`` when any row has one).

    Numbers are rounded; ``error`` is shown without its file name (the ``source`` beside it), and a long ``note``
    or ``error`` is cut at :data:`NOTE_WIDTH` characters.
    """
    import pandas as pd

    table = pd.DataFrame(head)
    for column in ("note", "error"):
        table[column] = table[column].map(lambda v: v or "")  # None in error rows
    table["error"] = [e.removeprefix(f"{src}: ") for src, e in zip(table["source"], table["error"], strict=True)]
    names = [c.format(t=target) for c in SHOWN] + [c for c in ("note", "error") if table[c].astype(bool).any()]
    out = table[names].copy()
    for column, digits in ((target, 4), (f"{target}_lower", 4), (f"{target}_upper", 4), ("domain_pvalue", 3)):
        out[column] = table[column].map(lambda v, d=digits: "" if v is None or v != v else f"{v:.{d}f}")
    out["in_domain"] = table["in_domain"].map(lambda v: "" if v is None else str(bool(v)))
    for column in ("note", "error"):
        if column in out:  # the file holds the whole text
            out[column] = out[column].map(lambda v: v if len(v) <= NOTE_WIDTH else v[:NOTE_WIDTH - 3] + "...")
    return out


def _check_predict_args(args) -> None:
    """Everything about the command line that can be wrong, before any heavy import."""
    from sciml.core.io.shipped import resolve_model

    check_alpha_arg(args.alpha)
    check_alpha_arg(args.beta, "--beta")
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.min_ess <= 0:
        raise ValueError(f"--min-ess must be > 0, got {args.min_ess}")
    require_inputs(args.inputs, "file or folder", INPUTS)
    if args.model is not None:
        resolve_model(args.model)


def run_predict(args, overrides: list[str]) -> int:
    """Stream predictions to CSV; print a table when small; exit 0, 1 (some error rows) or 3 (no row predicted)."""
    _check_predict_args(args)
    start = time.perf_counter()
    stage("crystal predict", "loading the model ...", terminal_only=True)
    import pandas as pd
    import torch

    import sciml.core.pyg  # noqa: F401 (first torch_geometric import of the process: without torch._dynamo)
    from sciml.crystal.artifact import DEFAULT_MODEL, load_model
    from sciml.crystal.predict import iter_prediction_rows
    from sciml.crystal.write import write_rows

    torch.set_num_threads(args.threads)
    predictor = load_model(args.model or DEFAULT_MODEL)
    t = predictor.target
    stage("crystal predict", f"loaded {predictor.path} ({t['name']} in {t['unit']}) in "
          f"{time.perf_counter() - start:.1f} s; predicting {len(args.inputs)} input(s) in batches of "
          f"{args.batch_size}, {torch.get_num_threads()} thread(s) ({args.threads_source})")
    if predictor.domain is None:
        stage("crystal predict", f"{predictor.path} has no domain.json: in_domain is known only for unseen "
              "elements; add it with `sciml crystal calibrate --operation domain`")
    rows = iter_prediction_rows(args.inputs, predictor, args.alpha, args.batch_size, progress=True, beta=args.beta,
                                shift_aware=args.shift_aware, min_ess=args.min_ess)
    written = write_rows(rows, predictor, args.output)
    if written.head:
        with pd.option_context("display.width", 200, "display.max_columns", 20):
            print(display_table(written.head, t["name"]).to_string(index=False))
    if written.n_rows > len(written.head):
        print(f"... {written.n_rows - len(written.head)} more rows")
    flagged = (f"{written.n_flagged} with in_domain False (their intervals carry no guarantee)" if predictor.domain
               or written.n_flagged else "domain unknown")
    print(f"{written.n_rows} structures, {written.n_errors} errors, {flagged} in {time.perf_counter() - start:.1f} s; "
          f"{t['name']} in {t['unit']}, {100 * (1 - args.alpha):.0f}% conformal intervals"
          + (" (shift-aware)" if args.shift_aware else "") + "; "
          + (f"wrote {args.output}" if args.output else "printed above (no --output)"), file=sys.stderr)
    if predictor.calibrator is not None and (note := infinite_interval_note(
            calibration_sizes(predictor.calibrator), args.alpha)):
        print(note, file=sys.stderr)
    code = predict_exit_code(written.n_rows, written.n_errors)
    if code:
        what = "no structure found in the inputs" if written.n_rows == 0 else (
            f"{written.n_errors} of {written.n_rows} inputs failed; the error column says why")
        print(f"exit code {code}: {what}", file=sys.stderr)
    return code


def _check_calibrate_args(args):
    """Check the command line; return the artifact folder. A shipped model given by name needs ``--output``."""
    from pathlib import Path

    from sciml.core.io.shipped import check_target

    check_alpha_arg(args.alpha)
    if not 0 < args.holdout < 1:
        raise ValueError(f"--holdout must be in (0, 1), got {args.holdout}")
    folder = check_target(args.model, args.output)
    if args.operation == "conformal":
        if args.data is None:
            raise ValueError("--operation conformal needs --data: a CSV with a cif column and the target column, "
                             "or a folder with id_prop.csv")
        require_inputs([args.data], "file or folder", "give a CSV with a cif column and the target column, or a "
                       "folder with id_prop.csv")
    elif args.data is not None:
        require_inputs([args.data], "file or folder", "give the model's training data (CSV or id_prop.csv folder)")
    if args.output is not None and Path(args.output).exists():
        raise FileExistsError(f"{args.output} already exists; choose another --output")
    return folder


def run_calibrate(args, overrides: list[str]) -> int:
    """Run the operation, print what changed (coverage before/after, or the domain test), write the artifact."""
    _check_calibrate_args(args)
    import torch

    from sciml.cli.feedback import progress
    from sciml.core.io.shipped import target_folder
    from sciml.crystal.calibrate import add_domain, recalibrate

    torch.set_num_threads(args.threads)
    with target_folder(args.model, args.output) as folder:
        if args.operation == "domain":
            stage("crystal calibrate", f"fitting domain.json of {args.model} on its recorded split ...")
            domain = add_domain(folder, args.data, args.seed)
            done = (f"domain test (k={domain.score.k}, beta={domain.score.beta:g}) on {domain.score.n_calib} "
                    "calibration structures")
        else:
            with progress(total=0, desc="calibrate: predict", unit="structure") as bar:
                rec = recalibrate(folder, args.data, args.method, args.alpha, args.score, args.group_by, args.target,
                                  args.holdout, args.seed, lambda m: stage("calibrate", m), bar)
            before = rec["before"] or {"coverage": float("nan"), "width": float("nan")}
            print(f"held-out structures: {rec['n_holdout']} (fitted on {rec['n_fit']}), target coverage "
                  f"{1 - rec['alpha']:.3f}")
            print(f"{'':8}{'coverage':>10}{'width':>12}")
            for name, row in (("before", before), ("after", rec["after"])):
                print(f"{name:8}{row['coverage']:>10.3f}{row['width']:>12.4f}")
            done = f"calibrator.json ({rec['method']}, score {rec['score']})"
    where = args.output or folder
    print(f"wrote {done} to {where}")
    return 0
