"""``sciml crystal predict --model DIR FILE_OR_DIR... [--alpha A] [--beta B] [--shift-aware] --output preds.csv``."""

from __future__ import annotations

import sys
import time

from sciml.cli.config import check_alpha_arg
from sciml.cli.feedback import (
    add_domain_arguments,
    calibration_sizes,
    infinite_interval_note,
    require_inputs,
    stage,
)

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
    add_domain_arguments(q, "structure")
    q.add_argument("--batch-size", type=int, default=64)
    q.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    q.set_defaults(run=run_predict)


def display_table(head: list[dict], target: str):
    """The printed table: value, interval (``*`` = out of domain, no guarantee), domain p-value, flag."""
    import pandas as pd

    def interval(row) -> str:
        lo, hi = row.get(f"{target}_lower"), row.get(f"{target}_upper")
        if row["error"] or lo is None or lo != lo:
            return ""
        return f"[{lo:.4f}, {hi:.4f}]" + ("*" if row["in_domain"] is False else "")

    table = pd.DataFrame(head)
    out = table[["source", "formula", "n_atoms"]].copy()
    out[target] = table[target].map(lambda v: "" if v is None or v != v else f"{v:.4f}")
    out["interval"] = [interval(row) for row in head]
    out["p_domain"] = table["domain_pvalue"].map(lambda v: "" if v is None or v != v else f"{v:.3f}")
    out["flag"] = table["error"].where(table["error"].astype(bool), table["in_domain"].map(
        lambda d: "out of domain (see note)" if d is False else ""))
    return out


def run_predict(args, overrides: list[str]) -> int:
    """Stream predictions to CSV; print a table when small. Exit 0 even with per-file error rows.

    Inputs that do not exist fail at once, before torch and pymatgen are imported.
    """
    check_alpha_arg(args.alpha)
    check_alpha_arg(args.beta, "--beta")
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
    if predictor.domain is None:
        stage("crystal predict", f"{predictor.path} has no domain.json: in_domain is known only for unseen "
              "elements; re-export the model (or sciml.crystal.export.add_domain) to get domain p-values")
    rows = iter_prediction_rows(args.inputs, predictor, args.alpha, args.batch_size, progress=True, beta=args.beta,
                                shift_aware=args.shift_aware, min_ess=args.min_ess)
    written = write_rows(rows, predictor, args.output)
    with pd.option_context("display.width", 160, "display.max_columns", 20, "display.max_colwidth", 60):
        print(display_table(written.head, t["name"]).to_string(index=False))
    if written.n_rows > len(written.head):
        print(f"... {written.n_rows - len(written.head)} more rows")
    flagged = (f"{written.n_flagged} out of domain (intervals marked *: no guarantee)" if predictor.domain
               or written.n_flagged else "domain unknown")
    print(f"{written.n_rows} structures, {written.n_errors} errors, {flagged} in {time.perf_counter() - start:.1f} s; "
          f"{t['name']} in {t['unit']}, {100 * (1 - args.alpha):.0f}% conformal intervals"
          + (" (shift-aware)" if args.shift_aware else "") + "; "
          + (f"wrote {args.output}" if args.output else "printed above (no --output)"), file=sys.stderr)
    if predictor.calibrator is not None and (note := infinite_interval_note(
            calibration_sizes(predictor.calibrator), args.alpha)):
        print(note, file=sys.stderr)
    return 0
