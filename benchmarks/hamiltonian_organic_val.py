"""Val-only choice between two organic training sets: both models on the val molecules that neither trained on.

The 119-molecule organic model (G2 + S22 monomers + SMILES molecules) replaced the 59-molecule one on this
comparison, made before the held-out molecules were scored. Both data folders are split the way the recipe splits
them (``configs/hamiltonian/organic.yaml``: by molecule, fractions 0.6/0.1/0.2/0.1, seed 0); the molecules scored
are the new split's val molecules absent from the old split's train molecules. Prints per molecule and mean H MAE
(µHa) of H0, each model and each model's ridge alone (network read-outs zeroed)::

    OMP_NUM_THREADS=1 python benchmarks/hamiltonian_organic_val.py --old-data OLD --new-data runs/data/organic-train \
        --model OLD_MODEL checkpoints/organic-pbe-def2svp

``OLD``: the folder of the first data command of the recipe alone (59 molecules); ``OLD_MODEL``: the model trained on
it (the shipped one before the SMILES molecules, in git history).
"""

from __future__ import annotations

import argparse

import numpy as np
from hamiltonian_organic import ROOT, ridge_only


def split(path: str):
    """The recipe's data module (split by molecule) of ``path``."""
    from sciml.cli.config import load_config
    from sciml.hamiltonian.task import datamodule

    data = load_config(ROOT / "configs" / "hamiltonian" / "organic.yaml")["data"] | {"path": path}
    return datamodule({"data": data})


def h_mae(structures, predictor) -> dict[str, float]:
    """Mean H MAE (µHa) per molecule of ``predictor`` (``None``: H0) on ``structures``."""
    from sciml.hamiltonian.predict import predict_structures

    layout = predictor.layout
    preds = [r.hamiltonian for r in predict_structures(structures, predictor, alpha=None)]
    per: dict[str, list[float]] = {}
    for s, h in zip(structures, preds, strict=True):
        per.setdefault(s.meta["molecule"], []).append(float(np.abs(h - s.to_dense("H", layout)).mean() * 1e6))
    return {m: float(np.mean(v)) for m, v in per.items()}


def main() -> None:
    """Print H0's and every model's (and its ridge's) mean H MAE on the val molecules neither model trained on."""
    import torch

    from sciml.hamiltonian.artifact import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old-data", required=True)
    ap.add_argument("--new-data", required=True)
    ap.add_argument("--model", nargs="+", required=True, help="artifacts to compare (old first)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    old_train = {s.meta["molecule"] for s in split(args.old_data).structures["train"]}
    val = [s for s in split(args.new_data).structures["val"] if s.meta["molecule"] not in old_train]
    print("molecules:", sorted({s.meta["molecule"] for s in val}))
    layout = load_model(args.model[0]).layout
    h0: dict[str, list[float]] = {}
    for s in val:
        h0.setdefault(s.meta["molecule"], []).append(float(np.abs(s.to_dense("H0", layout) - s.to_dense("H", layout))
                                                           .mean() * 1e6))
    print(f"H0: mean {np.mean([np.mean(v) for v in h0.values()]):.0f} µHa")
    for path in args.model:
        pred = load_model(path)
        for name, p in ((path, pred), (f"{path} (ridge alone)", ridge_only(pred))):
            res = h_mae(val, p)
            print(f"{name}: mean {np.mean(list(res.values())):.0f} µHa", {m: round(v) for m, v in res.items()})


if __name__ == "__main__":
    main()
