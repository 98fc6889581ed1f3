"""Cheap SCF settings of the Hamiltonian data engine against the reference settings, on small QM9 molecules.

Molecules: ``--n`` QM9 molecules with 4–6 heavy atoms drawn by ``default_rng(--seed)`` (one of them with fluorine),
at their QM9 geometries. Every setting runs the engine's own SCF (:func:`sciml.hamiltonian.data.generate.
run_molecule_scf`, PBE/def2-SVP, conv_tol 1e-10, one thread) on every molecule, interleaved per molecule so the
load of this shared machine falls on all settings alike (after a warm-up SCF of water):

- ``reference``: exact Coulomb/exchange, XC grid level 3 (what every npz holds unless told otherwise);
- ``df``, ``grid2``, ``grid1``, ``df_grid2``, ``df_grid1``: density fitting (pyscf's default JK-fit basis) and/or a
  coarser XC grid;
- ``df_grid1_final``: ``df_grid1`` then one reference-settings Fock build of its converged density (the stored H).

Per setting and molecule: H error against the reference (µHa; max-abs and MAE over all ``n_ao²`` elements), the
largest error of an occupied orbital energy (µHa), and SCF seconds. A setting **passes** when its worst molecule's
H MAE is ≤ 10 µHa; ``sciml.hamiltonian.data.cheap.MEASURED`` must hold the same verdicts (a unit test checks it).

Also measured on the reference results:

- ``storage``: bytes per molecule of the npz (float64 ``np.savez``, float64 ``np.savez_compressed``, float32
  compressed) and the error float32 storage would add to H, H0 (µHa) and S (dimensionless);
- ``seeding``: SCF cycles and seconds from pyscf's ``minao`` guess against a start from the density of
  ``--seed-model``'s predicted H (:class:`sciml.hamiltonian.seed.ModelGuess`, reference settings; molecules with
  an element the model never saw are listed as not seeded), the seconds the guess itself took, and the largest
  difference of the two converged H (µHa).

Writes ``benchmarks/results/hamiltonian_cheap_settings.json`` and prints a table. Usage::

    OMP_NUM_THREADS=1 python benchmarks/hamiltonian_cheap_settings.py [--n 6] [--seed 36]
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "hamiltonian_cheap_settings.json"
UHA = 1e6
SETTINGS = {"reference": {}, "df": {"density_fit": True}, "grid2": {"grid_level": 2}, "grid1": {"grid_level": 1},
            "df_grid2": {"density_fit": True, "grid_level": 2}, "df_grid1": {"density_fit": True, "grid_level": 1},
            "df_grid1_final": {"density_fit": True, "grid_level": 1, "final_build": True}}
LIMIT_UHA = 10.0


def pick_molecules(n: int, seed: int) -> list[int]:
    """``n`` QM9 indices with 4–6 heavy atoms: ``n - 1`` without fluorine and one with, drawn by ``seed``."""
    from sciml.hamiltonian.data.qm9 import qm9_table

    t = qm9_table()
    pool = t[(t["n_heavy"] >= 4) & (t["n_heavy"] <= 6)]
    has_f = pool["smiles"].str.contains("F")
    rng = np.random.default_rng(seed)
    chosen = rng.choice(pool.index[~has_f].to_numpy(), n - 1, replace=False).tolist()
    chosen.append(int(rng.choice(pool.index[has_f].to_numpy())))
    return sorted(int(i) for i in chosen)


def occupied_error(h: np.ndarray, ref: np.ndarray, s: np.ndarray, n_occ: int) -> float:
    """Largest |ε_i(H) − ε_i(H_ref)| over the occupied orbitals, Hartree."""
    from scipy.linalg import eigh

    return float(np.abs(eigh(h, s, eigvals_only=True)[:n_occ] - eigh(ref, s, eigvals_only=True)[:n_occ]).max())


def npz_bytes(mats: dict, dtype, compressed: bool) -> int:
    """Size of the three matrices written as one npz."""
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **{k: v.astype(dtype) for k, v in mats.items()})
    return buf.getbuffer().nbytes


def main(argv=None) -> int:
    """Run every setting on every molecule, then write the results file and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=6, help="molecules")
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--seed-model", default="organic-pbe-def2svp", help="model whose prediction seeds the SCF")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    from sciml.hamiltonian.data.generate import SCFSettings, run_molecule_scf
    from sciml.hamiltonian.data.qm9 import qm9_molecules
    from sciml.hamiltonian.seed import ModelGuess

    base = SCFSettings(device="cpu", threads=1)
    run_molecule_scf((8, 1, 1), np.array([[0, 0, 0.12], [0, 0.76, -0.47], [0, -0.76, -0.47]]), base)  # warm-up
    guess = ModelGuess(args.seed_model, base.basis)
    molecules = qm9_molecules(pick_molecules(args.n, args.seed))
    rows, storage, seeding = [], [], []
    for mol in molecules:
        pos = np.asarray(mol.positions)
        res = {name: run_molecule_scf(mol.numbers, pos, replace(base, **kw)) for name, kw in SETTINGS.items()}
        ref = res["reference"]
        h_ref, s, n_occ = ref["mats"]["H"], ref["mats"]["S"], ref["n_occupied"]
        row = {"index": mol.index, "smiles": mol.smiles, "formula": mol.formula, "n_atoms": len(mol.numbers),
               "n_ao": int(len(h_ref)), "settings": {}}
        for name, r in res.items():
            d = np.abs(r["mats"]["H"] - h_ref)
            row["settings"][name] = {"h_max_abs_uha": float(d.max() * UHA), "h_mae_uha": float(d.mean() * UHA),
                                     "occupied_max_uha": occupied_error(r["mats"]["H"], h_ref, s, n_occ) * UHA,
                                     "seconds": r["scf_seconds"], "cycles": r["scf_cycles"],
                                     "converged": r["converged"]}
        rows.append(row)
        mats = ref["mats"]
        err32 = {k: np.abs(v.astype(np.float32).astype(np.float64) - v) for k, v in mats.items()}
        storage.append({"index": mol.index, "n_ao": row["n_ao"],
                        "bytes_float64": npz_bytes(mats, np.float64, False),
                        "bytes_float64_compressed": npz_bytes(mats, np.float64, True),
                        "bytes_float32_compressed": npz_bytes(mats, np.float32, True),
                        "float32_h_max_abs_uha": float(err32["H"].max() * UHA),
                        "float32_h_mae_uha": float(err32["H"].mean() * UHA),
                        "float32_h0_max_abs_uha": float(err32["H0"].max() * UHA),
                        "float32_s_max_abs": float(err32["S"].max())})
        start = time.perf_counter()
        dm0 = guess(mol.numbers, pos)
        guess_seconds = time.perf_counter() - start
        if dm0 is None:
            seeding.append({"index": mol.index, "formula": mol.formula, "seeded": False,
                            "reason": "element outside the model"})
        else:
            seeded = run_molecule_scf(mol.numbers, pos, base, dm0=dm0)
            seeding.append({"index": mol.index, "formula": mol.formula, "seeded": True,
                            "cycles_minao": ref["scf_cycles"], "cycles_model": seeded["scf_cycles"],
                            "seconds_minao": ref["scf_seconds"], "seconds_model": seeded["scf_seconds"],
                            "seconds_guess": guess_seconds,
                            "h_max_abs_diff_uha": float(np.abs(seeded["mats"]["H"] - h_ref).max() * UHA)})
        print(f"{mol.index} {mol.formula}: " + ", ".join(
            f"{k} {v['h_mae_uha']:.2f}/{v['h_max_abs_uha']:.1f} µHa {v['seconds']:.1f}s"
            for k, v in row["settings"].items()), flush=True)

    summary = {}
    ref_seconds = sum(r["settings"]["reference"]["seconds"] for r in rows)
    for name in SETTINGS:
        per = [r["settings"][name] for r in rows]
        worst_mae = max(p["h_mae_uha"] for p in per)
        summary[name] = {**SETTINGS[name], "h_mae_uha_worst": worst_mae,
                         "h_mae_uha_mean": float(np.mean([p["h_mae_uha"] for p in per])),
                         "h_max_abs_uha_worst": max(p["h_max_abs_uha"] for p in per),
                         "occupied_max_uha_worst": max(p["occupied_max_uha"] for p in per),
                         "time_ratio": sum(p["seconds"] for p in per) / ref_seconds,
                         "time_ratio_median": float(np.median([p["seconds"] / r["settings"]["reference"]["seconds"]
                                                               for p, r in zip(per, rows, strict=True)])),
                         "passes": bool(worst_mae <= LIMIT_UHA)}
    seeded = [s for s in seeding if s["seeded"]]
    seed_summary = {"model": args.seed_model, "n_seeded": len(seeded), "n_not_seeded": len(seeding) - len(seeded)}
    if seeded:
        seed_summary |= {
            "cycles_minao_mean": float(np.mean([s["cycles_minao"] for s in seeded])),
            "cycles_model_mean": float(np.mean([s["cycles_model"] for s in seeded])),
            "cycles_saved_mean": float(np.mean([s["cycles_minao"] - s["cycles_model"] for s in seeded])),
            "seconds_ratio_model_over_minao": sum(s["seconds_model"] + s["seconds_guess"] for s in seeded)
            / sum(s["seconds_minao"] for s in seeded),
            "h_max_abs_diff_uha_worst": max(s["h_max_abs_diff_uha"] for s in seeded)}
    store = {"mean_bytes_float64": float(np.mean([s["bytes_float64"] for s in storage])),
             "compression_float64": float(np.mean([s["bytes_float64"] / s["bytes_float64_compressed"]
                                                   for s in storage])),
             "compression_float32": float(np.mean([s["bytes_float64"] / s["bytes_float32_compressed"]
                                                   for s in storage])),
             "float32_h_max_abs_uha_worst": max(s["float32_h_max_abs_uha"] for s in storage),
             "float32_h0_max_abs_uha_worst": max(s["float32_h0_max_abs_uha"] for s in storage),
             "float32_h_mae_uha_worst": max(s["float32_h_mae_uha"] for s in storage),
             "float32_s_max_abs_worst": max(s["float32_s_max_abs"] for s in storage)}
    payload = {"command": "OMP_NUM_THREADS=1 python benchmarks/hamiltonian_cheap_settings.py "
                          f"--n {args.n} --seed {args.seed} --seed-model {args.seed_model}",
               "threads": 1, "xc": base.xc, "basis": base.basis, "conv_tol": base.conv_tol, "limit_uha": LIMIT_UHA,
               "pass_rule": "worst molecule's H MAE (all n_ao^2 elements) <= limit_uha",
               "summary": summary, "storage": store, "seeding": seed_summary,
               "molecules": rows, "storage_per_molecule": storage, "seeding_per_molecule": seeding}
    write_json(args.output, payload)
    print(f"{'setting':16s} {'MAE worst':>10s} {'max-abs':>9s} {'occ max':>8s} {'time':>6s}  pass")
    for name, v in summary.items():
        print(f"{name:16s} {v['h_mae_uha_worst']:10.2f} {v['h_max_abs_uha_worst']:9.1f} "
              f"{v['occupied_max_uha_worst']:8.2f} {v['time_ratio']:6.2f}  {v['passes']}")
    print(f"storage: {store}\nseeding: {seed_summary}\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
