"""Post-hoc operations on an exported crystal artifact (``sciml crystal calibrate --operation ...``).

Two operations, neither touching the weights (their ``weights_sha256`` stays valid):

- ``conformal`` (:func:`recalibrate`): refit the conformal calibrator on new labelled data (a CSV with a ``cif``
  column and the target column, or a folder with ``id_prop.csv``). The data are split at random into a fitting
  part and a held-out part; the new calibrator is fitted on the fitting part only, and the coverage and mean width
  of the old and the new calibrator are measured on the held-out part. ``metadata.json`` gets a ``recalibration``
  record (data checksum, sizes, coverages, ``calibrator_sha256``).
- ``domain`` (:func:`add_domain`): fit ``domain.json`` (:mod:`sciml.crystal.domain`) on the artifact's recorded
  train and calib splits, rebuilt from its training data (same file, fractions and seed; checksum checked).

The artifact is rewritten atomically (:func:`sciml.core.io.atomic.atomic_directory`): in place, or as a new folder
``output`` beside an unchanged source.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

from sciml.core.io.artifact import ArtifactError, add_extra_files, load_artifact
from sciml.core.io.atomic import atomic_directory
from sciml.core.io.checksum import sha256_file
from sciml.crystal.artifact import load_model
from sciml.crystal.calibration import ensure_group_function
from sciml.crystal.data.sources import labels_file, read_labelled
from sciml.crystal.domain import FILE as DOMAIN_FILE
from sciml.crystal.domain import CrystalDomain, fit_domain

__all__ = ["OPERATIONS", "add_domain", "predict_labelled", "recalibrate"]

OPERATIONS = ("conformal", "domain")
METHODS = ("split", "mondrian", "multigroup", "conditional")


def predict_labelled(predictor, table, batch_size: int = 64, bar=None):
    """Model mean and σ (``None`` without a σ head), float64 ``(n,)``, for the structures of ``table``.

    ``bar`` (optional) is a progress bar updated per batch.
    """
    import torch
    from torch_geometric.data import Batch

    from sciml.crystal.data.graphs import structure_to_graph

    means, sigmas = [], []
    rows = list(zip(table["id"], table["structure"], strict=True))
    with torch.no_grad():
        for start in range(0, len(rows), batch_size):
            chunk = rows[start:start + batch_size]
            batch = Batch.from_data_list([structure_to_graph(s, predictor.graph, str(i)) for i, s in chunk])
            pred = predictor.module.predict_step(batch)
            means.append(pred.mean.double())
            sigmas.append(None if pred.sigma is None else pred.sigma.double())
            if bar is not None:
                bar.update(len(chunk))
    return torch.cat(means), (None if any(s is None for s in sigmas) else torch.cat(sigmas))


def _measure(cal, mean, sigma, y, structures, alpha) -> dict:
    from sciml.uq import coverage, mean_width
    from sciml.uq.groups import predict_interval

    band = predict_interval(cal, mean, sigma, alpha, structures)
    return {"coverage": float(coverage(band, y)), "width": float(mean_width(band))}


def write_calibrator(folder: Path, calibrator: dict, record: dict) -> None:
    """Rewrite the artifact folder atomically with a new ``calibrator.json`` and a ``recalibration`` record."""
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


def check_group_by(method: str, group_by: str | None) -> None:
    """Raise ``ValueError`` for an unknown calibrator ``method`` or group function (checked before any work).

    ``group_by`` is one group function for ``mondrian`` and comma-separated names for ``multigroup`` (ignored by
    ``split``).
    """
    from sciml.uq.groups import GROUP_FUNCTIONS

    if method not in METHODS:
        raise ValueError(f"--method {method!r} is not one of {', '.join(METHODS)}")
    if group_by is None or method == "split":
        return
    names = [group_by] if method == "mondrian" else group_by.split(",")
    for name in names:
        ensure_group_function(name)  # registers a resolved cell_size:<edges> name
    unknown = [n for n in names if n not in GROUP_FUNCTIONS]
    if unknown:
        raise ValueError(f"--group-by: unknown group function(s) {unknown}; known: {sorted(GROUP_FUNCTIONS)}")


def recalibrate(model: str | Path, data: str | Path, method: str = "split", alpha: float = 0.1,
                score: str | None = None, group_by: str | None = None, target: str | None = None,
                holdout: float = 0.5, seed: int = 0, stage=None, bar=None) -> dict:
    """Refit and write the calibrator of the artifact folder ``model`` on ``data``; return the record.

    Parameters
    ----------
    model : str or Path
        Artifact folder (rewritten in place; see :func:`sciml.core.io.shipped.target_folder` for a copy).
    data : str or Path
        Labelled structures: a CSV with a ``cif`` column and ``target``, or a folder with ``id_prop.csv``.
    method, score, group_by
        Calibrator to fit (:func:`sciml.uq.groups.build_calibrator`); ``score`` defaults to the artifact's.
    alpha : float
        Miscoverage stored with the calibrator and used for the held-out coverage.
    target : str, optional
        Target column of a CSV (default: the model's target name).
    holdout, seed
        Fraction of ``data`` held out to measure coverage, and the seed of that split.
    stage : callable, optional
        ``stage(message)`` reports progress lines.
    bar : optional
        Progress bar updated while the labelled structures are predicted.

    """
    import torch

    from sciml.uq import check_alpha
    from sciml.uq.groups import build_calibrator, fit_calibrator

    alpha = check_alpha(alpha)
    check_group_by(method, group_by)
    start = time.perf_counter()
    predictor = load_model(model)
    old = predictor.calibrator
    if predictor.module.zero_inflated:
        raise ValueError(f"{model}: a zero-inflated model (hurdle intervals for '{predictor.target['name']}') cannot "
                         "be recalibrated here; re-export it with `sciml export --calibrate` on a run config whose "
                         "data.path holds the new labelled structures")
    score = score or getattr(old, "score_name", "absolute")
    table = read_labelled(data, target or predictor.target["name"])
    fit_idx, hold_idx = _split(len(table), holdout, seed)
    cal = build_calibrator({"method": method} | ({"group_by": group_by} if group_by else {}), score, alpha)
    if stage:
        stage(f"loaded {model} and {len(table)} labelled structures from {data} in "
              f"{time.perf_counter() - start:.1f} s; predicting them")
    if bar is not None:
        bar.reset(total=len(table))
    mean, sigma = predict_labelled(predictor, table, bar=bar)
    if score == "normalized" and sigma is None:
        raise ValueError(f"{model}: the model predicts no sigma; use --score absolute")
    y, structures = torch.tensor(table["y"].to_numpy(), dtype=torch.float64), list(table["structure"])
    part = {name: (mean[i], None if sigma is None else sigma[i], y[i], [structures[j] for j in i.tolist()])
            for name, i in (("fit", fit_idx), ("hold", hold_idx))}
    if stage:
        stage(f"fitting the {method} calibrator on {len(fit_idx)} structures, measuring coverage on the "
              f"{len(hold_idx)} held out")
    m, s, t, st = part["fit"]
    fit_calibrator(cal, m, t, s, st)
    m, s, t, st = part["hold"]
    record = {"data": str(data), "data_sha256": sha256_file(labels_file(data)),
              "method": method, "score": score, "alpha": alpha, "group_by": getattr(cal, "group_by", None),
              "n_fit": len(fit_idx), "n_holdout": len(hold_idx), "seed": seed,
              "before": _measure(old, m, s, t, st, alpha) if old is not None else None,
              "after": _measure(cal, m, s, t, st, alpha)}
    write_calibrator(predictor.path, cal.to_dict(), record)
    load_model(predictor.path)  # the rewritten artifact loads (checksum and calibrator verified)
    return record


def add_domain(path: str | Path, data_path: str | None = None, seed: int = 0) -> CrystalDomain:
    """Add ``domain.json`` to an exported crystal artifact without changing its weights, config or calibrator.

    The artifact's recorded split is rebuilt from its ``config.yaml`` data settings (same file, split fractions
    and seed); the data file must hash to the ``data_sha256`` of ``metadata.json`` and the split sizes must
    match, so the train and calib splits are exactly those of the export.

    Parameters
    ----------
    path : str or Path
        Artifact folder (with a calibrator).
    data_path : str, optional
        Where the training data is now, when not at the recorded ``data.path``.
    seed : int
        Seed of the coreset and shift-subset draws.

    """
    from sciml.crystal.export import domain_lines, domain_summary
    from sciml.crystal.task import datamodule

    art, predictor = load_artifact(path, task="crystal"), load_model(path, domain=False)  # replaces an old one
    if predictor.calibrator is None:
        raise ArtifactError(f"{art.path}: no calibrator; the domain operation needs a calibrated artifact")
    data = dict(art.config["data"]) | ({"path": str(data_path)} if data_path else {})
    if not Path(data["path"]).exists():
        raise FileNotFoundError(f"{data['path']}: the model's training data is not there; pass its location "
                                "with --data")
    digest = sha256_file(labels_file(data["path"]))
    if digest != art.metadata.get("metrics", {}).get("data_sha256"):
        raise ArtifactError(f"{data['path']}: sha256 differs from the data the model was trained on; pass the "
                            "original file")
    dm = datamodule({"data": data}, None)
    if dm.split_sizes() != art.metadata.get("split_sizes"):
        raise ArtifactError(f"{art.path}: rebuilt split {dm.split_sizes()} differs from the recorded "
                            f"{art.metadata.get('split_sizes')}")
    domain = fit_domain(predictor.module, dm, predictor.calibrator, seed=seed,
                        calibrator_sha256=sha256_file(art.path / "calibrator.json"))
    how = (f"added after export by `sciml crystal calibrate --operation domain` from the recorded split rebuilt "
           f"from `{art.config['data']['path']}` (sha256 checked, split seed {data.get('split', {}).get('seed')}); "
           "weights and calibrator unchanged")
    text = (art.path / "README.md").read_text().rstrip("\n")
    text = "\n".join(line for line in text.splitlines() if not line.startswith("- Applicability domain")
                     and not line.startswith("- `--shift-aware`"))
    add_extra_files(art.path, {DOMAIN_FILE: domain.to_dict()}, metadata={"domain": domain_summary(domain)},
                    card="\n".join([text, *domain_lines(domain, how), ""]))
    return domain
