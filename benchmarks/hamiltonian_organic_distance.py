"""Val-only diagnosis of an organic Hamiltonian model: its H error by atom-pair distance, and read-out envelopes.

Two things, both on the val molecules of the recipe's split (``configs/hamiltonian/organic.yaml``: by molecule,
fractions 0.6/0.1/0.2/0.1, seed 0), never on the held-out molecules:

1. Mean |ΔH error| (µHa) per block by the distance of its atom pair (on-site, then 0.5 Å bins up to 7 Å), for H0,
   the model and its ridge alone (network read-outs zeroed), with each bin's share of the model's total error.
2. The model's val H MAE and occupied orbital-energy MAE with cosine envelopes ``[r_on, r_off]`` put on its
   network's pair corrections without retraining (``HamiltonianModel.readout_envelope``).

This is how ``model.readout_cutoff: [1.5, 3.0]`` was chosen: the model before it (``checkpoints/organic-pbe-def2svp``
at commit 383e180) had 350–490 µHa of error on every pair 3–7 Å apart, where H0 and the ridge are far better::

    OMP_NUM_THREADS=1 python benchmarks/hamiltonian_organic_distance.py --model MODEL --data runs/data/organic-train

Prints a table and a JSON summary; writes nothing.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from hamiltonian_organic import errors, module_copy, reference, ridge_only
from hamiltonian_organic_val import split

ENVELOPES = [None, (1.0, 2.0), (1.5, 2.2), (1.5, 3.0), (2.0, 3.0), (2.0, 4.0), (3.0, 5.0)]


def distance_bin(d: float) -> str:
    """``onsite`` for d = 0, else the upper edge of its 0.5 Å bin (capped at 7 Å)."""
    return "onsite" if d == 0 else f"<{min(np.ceil(d * 2) / 2, 7.0):.1f}"


def by_distance(structures, predictor, results) -> dict[str, dict[str, float]]:
    """Per distance bin: mean |error| (µHa) of the model and of H0 over its block entries, and its share of entries."""
    layout, sums = predictor.layout, {}
    for s, r in zip(structures, results, strict=True):
        off = layout.atom_offsets(s.numbers)
        ref = s.to_dense("H", layout)
        err, err0 = np.abs(r.hamiltonian - ref), np.abs(s.to_dense("H0", layout) - ref)
        pos = np.asarray(s.positions)
        for i in range(len(s.numbers)):
            for j in range(len(s.numbers)):
                blk = np.s_[off[i]:off[i + 1], off[j]:off[j + 1]]
                acc = sums.setdefault(distance_bin(float(np.linalg.norm(pos[i] - pos[j]))), np.zeros(3))
                acc += (err[blk].sum(), err0[blk].sum(), err[blk].size)
    total_err, total_n = sum(a[0] for a in sums.values()), sum(a[2] for a in sums.values())
    return {k: {"model": a[0] / a[2] * 1e6, "h0": a[1] / a[2] * 1e6, "share_of_error": a[0] / total_err,
                "share_of_entries": a[2] / total_n} for k, a in sorted(sums.items())}


def with_envelope(predictor, envelope):
    """A copy of ``predictor`` whose network pair corrections carry the cosine envelope ``(r_on, r_off)``."""
    from sciml.core.radial import CosineCutoff

    out = module_copy(predictor)
    out.module.readout_envelope = None if envelope is None else CosineCutoff(envelope[1], envelope[0])
    return out


def scores(structures, predictor) -> dict[str, float]:
    """Mean H MAE (µHa) and occupied orbital-energy MAE (meV) over ``structures``."""
    from sciml.hamiltonian.predict import predict_structures

    rows = []
    for s, r in zip(structures, predict_structures(structures, predictor, alpha=None), strict=True):
        eps = r.orbital_energies
        rows.append(errors(r.hamiltonian, eps, reference(s, predictor.layout, len(eps)), r.n_occupied))
    return {k: float(np.mean([row[k] for row in rows])) for k in ("h_mae_microhartree", "occ_mae_mev")}


def main() -> None:
    """Print the distance table of the model and its ridge, then the envelope sweep."""
    import torch

    from sciml.hamiltonian.artifact import load_model
    from sciml.hamiltonian.predict import predict_structures

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", default="runs/data/organic-train")
    args = ap.parse_args()
    torch.set_num_threads(1)
    val = split(args.data).structures["val"]
    model = load_model(args.model)
    table = {name: by_distance(val, p, predict_structures(val, p, alpha=None))
             for name, p in (("model", model), ("ridge", ridge_only(model)))}
    print("| pair distance Å | H0 µHa | ridge µHa | model µHa | share of model error |\n|---|---|---|---|---|")
    for k, row in table["model"].items():
        print(f"| {k} | {row['h0']:.0f} | {table['ridge'][k]['model']:.0f} | {row['model']:.0f} | "
              f"{row['share_of_error']:.3f} |")
    sweep = {str(e): scores(val, with_envelope(model, e)) for e in ENVELOPES}
    for e, sc in sweep.items():
        print(f"envelope {e}: val H MAE {sc['h_mae_microhartree']:.1f} µHa, occupied {sc['occ_mae_mev']:.1f} meV")
    print(json.dumps({"n_val_conformers": len(val), "by_distance": table, "envelopes": sweep}, indent=1))


if __name__ == "__main__":
    main()
