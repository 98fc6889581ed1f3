"""``sciml crystal predict --model DIR FILE_OR_DIR... [--alpha A] --output preds.csv``."""

from __future__ import annotations

import sys
import time

from sciml.cli.config import check_alpha_arg
from sciml.cli.feedback import calibration_sizes, infinite_interval_note, require_inputs, stage

INPUTS = "give structure files (CIF, POSCAR, extxyz, json), folders of them, or CSV files with a 'cif' column"


def add_parser(sub, name: str) -> None:
    """Register ``crystal`` and its sub-verb ``predict``."""
    p = sub.add_parser(name, help="crystal property prediction")
    verbs = p.add_subparsers(dest="crystal_verb", required=True)
    q = verbs.add_parser("predict", help="predict from structure files (CIF, POSCAR, extxyz, json, folders, CSV)")
    q.add_argument("inputs", nargs="+", help="structure files, folders, or CSV files with a 'cif' column")
    q.add_argument("--model", default=None, help="artifact folder (default: checkpoints/perov5-heat-all)")
    q.add_argument("--alpha", type=float, default=0.1, help="miscoverage of the conformal interval")
    q.add_argument("--output", default=None, help="CSV to write (atomically); printed when omitted")
    q.add_argument("--batch-size", type=int, default=64)
    q.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    q.set_defaults(run=run_predict)


def run_predict(args, overrides: list[str]) -> int:
    """Stream predictions to CSV; print a table when small. Exit 0 even with per-file error rows.

    Inputs that do not exist fail at once, before torch and pymatgen are imported.
    """
    check_alpha_arg(args.alpha)
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    require_inputs(args.inputs, "file or folder", INPUTS)
    start = time.perf_counter()
    stage("crystal predict", "loading the model ...", terminal_only=True)
    import pandas as pd
    import torch

    from sciml.crystal.artifact import DEFAULT_MODEL, load_model
    from sciml.crystal.predict import iter_prediction_rows
    from sciml.crystal.write import write_rows

    if args.threads:
        torch.set_num_threads(args.threads)
    predictor = load_model(args.model or DEFAULT_MODEL)
    t = predictor.target
    stage("crystal predict", f"loaded {predictor.path} ({t['name']} in {t['unit']}) in "
          f"{time.perf_counter() - start:.1f} s; predicting {len(args.inputs)} input(s) in batches of "
          f"{args.batch_size}, {torch.get_num_threads()} thread(s)")
    rows = iter_prediction_rows(args.inputs, predictor, args.alpha, args.batch_size, progress=True)
    head, n_rows, n_errors = write_rows(rows, predictor, args.output)
    with pd.option_context("display.width", 160, "display.max_columns", 20, "display.max_colwidth", 60):
        table = pd.DataFrame(head)
        table["flag"] = table["error"].where(table["error"].astype(bool),
                                             table["note"].map(lambda n: "extrapolation (see note)" if n else ""))
        table = table.drop(columns=["alpha", "note", "error"])
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    if n_rows > len(head):
        print(f"... {n_rows - len(head)} more rows")
    print(f"{n_rows} structures, {n_errors} errors in {time.perf_counter() - start:.1f} s; {t['name']} in "
          f"{t['unit']}, {100 * (1 - args.alpha):.0f}% conformal intervals; "
          + (f"wrote {args.output}" if args.output else "printed above (no --output)"), file=sys.stderr)
    if predictor.calibrator is not None and (note := infinite_interval_note(
            calibration_sizes(predictor.calibrator), args.alpha)):
        print(note, file=sys.stderr)
    return 0
