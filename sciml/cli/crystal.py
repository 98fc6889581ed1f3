"""``sciml crystal predict --model DIR FILE_OR_DIR... [--alpha A] --output preds.csv``."""

from __future__ import annotations

import sys

from sciml.cli.config import check_alpha_arg


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
    """Stream predictions to CSV; print a table when small. Exit 0 even with per-file error rows."""
    import pandas as pd
    import torch

    from sciml.crystal import iter_prediction_rows, load_model
    from sciml.crystal.artifact import DEFAULT_MODEL
    from sciml.crystal.write import write_rows

    if args.threads:
        torch.set_num_threads(args.threads)
    check_alpha_arg(args.alpha)
    predictor = load_model(args.model or DEFAULT_MODEL)
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
    t = predictor.target
    print(f"{n_rows} structures, {n_errors} errors; {t['name']} in {t['unit']}, "
          f"{100 * (1 - args.alpha):.0f}% conformal intervals" + (f"; wrote {args.output}" if args.output else ""),
          file=sys.stderr)
    return 0
