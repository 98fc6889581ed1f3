"""``sciml calibrate --model ART --data DATA --method split|mondrian|multigroup [--alpha A]``: refit a calibrator.

The labelled data (a CSV with a ``cif`` column and the target column, or a folder with ``id_prop.csv``) is
split at random into a fitting part and a held-out part. The new calibrator is fitted on the fitting part only;
the coverage and mean width of the old and the new calibrator are measured on the held-out part and printed.
The artifact folder is then rewritten atomically (:func:`sciml.core.io.atomic.atomic_directory`): the same weights
(their ``weights_sha256`` stays valid), the new ``calibrator.json``, and ``metadata.json`` with a
``recalibration`` record (data checksum, sizes, coverages, ``calibrator_sha256``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

from sciml.cli.feedback import progress, require_inputs, stage

METHODS = ("split", "mondrian", "multigroup")
#: group functions of crystal models (registered by :mod:`sciml.crystal.calibration`; named here so that
#: ``--help`` needs no torch; ``tests/integration/test_startup.py`` checks that the two agree)
GROUP_NAMES = ("anion", "crystal_system")


def add_parser(sub, name: str) -> None:
    """Register ``calibrate``."""
    p = sub.add_parser(name, help="refit a model artifact's conformal calibrator on new labelled data")
    p.add_argument("--model", required=True, help="artifact folder (from `sciml export`)")
    p.add_argument("--data", required=True, help="CSV with a cif column and the target column, or a folder "
                   "with id_prop.csv")
    p.add_argument("--method", default="split", choices=METHODS, help="calibrator to fit (default split)")
    p.add_argument("--alpha", type=float, default=0.1, help="miscoverage (default 0.1)")
    p.add_argument("--score", default=None, choices=("absolute", "normalized"),
                   help="conformity score (default: the artifact's, else absolute)")
    p.add_argument("--group-by", default=None,
                   help=f"group function(s) {list(GROUP_NAMES)}: one for --method mondrian (default "
                   "crystal_system), comma-separated for multigroup (default crystal_system,anion)")
    p.add_argument("--target", default=None, help="target column of a CSV (default: the model's target name)")
    p.add_argument("--holdout", type=float, default=0.5, help="fraction held out to measure coverage")
    p.add_argument("--seed", type=int, default=0, help="seed of the fit/held-out split")
    p.set_defaults(run=run)


def predict_labelled(predictor, table, batch_size: int = 64):
    """Model mean and σ (``None`` without a σ head), float64 ``(n,)``, for the structures of ``table``.

    Draws a progress bar per batch on a terminal.
    """
    import torch
    from torch_geometric.data import Batch

    from sciml.crystal.data.graphs import structure_to_graph

    means, sigmas = [], []
    rows = list(zip(table["id"], table["structure"], strict=True))
    with torch.no_grad(), progress(total=len(rows), desc="calibrate: predict", unit="structure") as bar:
        for start in range(0, len(rows), batch_size):
            chunk = rows[start:start + batch_size]
            batch = Batch.from_data_list([structure_to_graph(s, predictor.graph, str(i)) for i, s in chunk])
            pred = predictor.module.predict_step(batch)
            means.append(pred.mean.double())
            sigmas.append(None if pred.sigma is None else pred.sigma.double())
            bar.update(len(chunk))
    return torch.cat(means), (None if any(s is None for s in sigmas) else torch.cat(sigmas))


def _measure(cal, mean, sigma, y, structures, alpha) -> dict:
    from sciml.uq import coverage, mean_width
    from sciml.uq.groups import predict_interval

    band = predict_interval(cal, mean, sigma, alpha, structures)
    return {"coverage": float(coverage(band, y)), "width": float(mean_width(band))}


def write_calibrator(folder: Path, calibrator: dict, record: dict) -> None:
    """Rewrite the artifact folder atomically with a new ``calibrator.json`` and a ``recalibration`` record."""
    from sciml.core.io.artifact import load_artifact
    from sciml.core.io.atomic import atomic_directory

    metadata = load_artifact(folder).metadata  # verifies the weights checksum before anything is replaced
    text = json.dumps(calibrator)
    metadata["recalibration"] = record | {"calibrator_sha256": hashlib.sha256(text.encode()).hexdigest()}
    with atomic_directory(folder) as tmp:
        for item in folder.iterdir():
            if item.is_file() and item.name not in ("calibrator.json", "metadata.json"):
                shutil.copy2(item, tmp / item.name)
        (tmp / "calibrator.json").write_text(text)
        (tmp / "metadata.json").write_text(json.dumps(metadata, indent=1))


def _split(n: int, holdout: float, seed: int):
    import torch

    if not 0 < holdout < 1:
        raise ValueError(f"--holdout must be in (0, 1), got {holdout}")
    n_hold = round(n * holdout)
    if n_hold < 1 or n - n_hold < 1:
        raise ValueError(f"need labelled structures in both the fitting and the held-out part; got {n} rows "
                         f"with --holdout {holdout}: add data")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return perm[n_hold:], perm[:n_hold]


def recalibrate(model: str, data: str, method: str = "split", alpha: float = 0.1, score: str | None = None,
                group_by: str | None = None, target: str | None = None, holdout: float = 0.5,
                seed: int = 0) -> dict:
    """Refit and write the calibrator of the artifact ``model`` on ``data``; return the record.

    Prints stage lines (``calibrate: ...``) on stderr once the inputs are read and checked.
    """
    import torch

    import sciml.crystal.calibration  # noqa: F401  (registers the crystal group functions)
    from sciml.core.io.checksum import sha256_file
    from sciml.crystal.artifact import load_model
    from sciml.crystal.data.sources import labels_file, read_labelled
    from sciml.uq import check_alpha
    from sciml.uq.groups import build_calibrator, fit_calibrator

    alpha = check_alpha(alpha)
    start = time.perf_counter()
    predictor = load_model(model)
    old = predictor.calibrator
    score = score or getattr(old, "score_name", "absolute")
    table = read_labelled(data, target or predictor.target["name"])
    fit_idx, hold_idx = _split(len(table), holdout, seed)
    cal = build_calibrator({"method": method} | ({"group_by": group_by} if group_by else {}), score, alpha)
    stage("calibrate", f"loaded {model} and {len(table)} labelled structures from {data} in "
          f"{time.perf_counter() - start:.1f} s; predicting them")
    mean, sigma = predict_labelled(predictor, table)
    if score == "normalized" and sigma is None:
        raise ValueError(f"{model}: the model predicts no sigma; use --score absolute")
    y, structures = torch.tensor(table["y"].to_numpy(), dtype=torch.float64), list(table["structure"])
    part = {name: (mean[i], None if sigma is None else sigma[i], y[i], [structures[j] for j in i.tolist()])
            for name, i in (("fit", fit_idx), ("hold", hold_idx))}
    stage("calibrate", f"fitting the {method} calibrator on {len(fit_idx)} structures, measuring coverage on the "
          f"{len(hold_idx)} held out")
    m, s, t, st = part["fit"]
    fit_calibrator(cal, m, t, s, st)
    m, s, t, st = part["hold"]
    record = {"data": str(data), "data_sha256": sha256_file(labels_file(data)),
              "method": method, "score": score, "alpha": alpha, "group_by": getattr(cal, "group_by", None),
              "n_fit": len(fit_idx), "n_holdout": len(hold_idx), "seed": seed,
              "before": _measure(old, m, s, t, st, alpha) if old is not None else None,
              "after": _measure(cal, m, s, t, st, alpha)}
    write_calibrator(Path(model), cal.to_dict(), record)
    load_model(model)  # the rewritten artifact loads (checksum and calibrator verified)
    return record


def run(args, overrides: list[str]) -> int:
    """Refit, print coverage before/after on the held-out part, write the artifact."""
    require_inputs([args.data], "file or folder", "give a CSV with a cif column and the target column, or a "
                   "folder with id_prop.csv")
    rec = recalibrate(args.model, args.data, args.method, args.alpha, args.score, args.group_by, args.target,
                      args.holdout, args.seed)
    before = rec["before"] or {"coverage": float("nan"), "width": float("nan")}
    print(f"held-out structures: {rec['n_holdout']} (fitted on {rec['n_fit']}), target coverage {1 - rec['alpha']:.3f}")
    print(f"{'':8}{'coverage':>10}{'width':>12}")
    for name, row in (("before", before), ("after", rec["after"])):
        print(f"{name:8}{row['coverage']:>10.3f}{row['width']:>12.4f}")
    print(f"wrote {Path(args.model) / 'calibrator.json'} ({rec['method']}, score {rec['score']})")
    return 0
