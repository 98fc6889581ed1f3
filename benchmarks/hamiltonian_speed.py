"""End-to-end speed of ``sciml hamiltonian predict`` against the pyscf SCF, by molecule size, in one run.

Molecules of increasing size (closed-shell H/C/N/O), each on fresh conformers (``displaced_conformers``,
σ = 0.05 Å, seed 2026, a seed no data set used):

- water (3 atoms), ethanol (9), uracil (12): the package's built-in geometries;
- indole C8H7N (16): the indole monomer of ASE's S22 ``Indole-benzene_complex_stack`` (split by connectivity);
- uracil dimer C8H8N4O4 (24): S22 ``Uracil_dimer_h-bonded``, the whole hydrogen-bonded complex;
- adenine–thymine C10H11N7O2 (30): S22 ``Adenine-thymine_Watson-Crick_complex``, the whole base pair.

For each size, on the same geometries, one thread (``OMP_NUM_THREADS=1``, ``--threads 1``):

- **predict**: the whole ``sciml hamiltonian predict`` command on all ``n`` conformers of the size in one call
  (subprocess wall time, and its CPU time from ``getrusage``), split with the command's own ``time:`` line
  (:func:`sciml.cli.hamiltonian.timing_line`) into model loading, reading, pyscf H0+S, network and writing;
  start-up = wall − those stages (Python start-up and imports);
- **SCF**: what ``sciml data hamiltonian`` runs (``run_molecule_scf``, default ``SCFSettings``: PBE/def2-SVP,
  grid level 3, conv_tol 1e-10) on the first ``n_scf`` of those conformers: its kernel wall time (the
  ``scf_seconds`` it records) and CPU time (``process_time`` around the same kernel call).

The two are interleaved in ``--rounds`` rounds (default 3): each round runs every predict command, then its share
of the SCF conformers, and each ratio is the median over rounds of that round's ratio. This machine is shared; its
speed drifts by up to 2x within minutes, so a ratio of timings taken minutes apart is the stable quantity.

Ratios per size: ``scf_over_predict`` = SCF seconds per molecule / (command seconds / n) — the whole command,
start-up included, amortised over its ``n`` inputs; ``scf_over_predict_marginal`` = SCF per molecule / stage
seconds per molecule (each further input of a call); ``break_even_n_10x``: the smallest number of inputs of one
call at which the whole command is ≥ 10x faster than the SCFs; ``scf_over_h0_bound`` = median SCF / pyscf H0+S
per molecule (no predict that builds H0 this way can beat it). The water row is also run with the shipped water
model (its H0 is the exact one). Merges key ``"speed"`` into ``benchmarks/results/hamiltonian.json`` (re-read
right before writing; other keys kept) and prints a table.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/hamiltonian_speed.py [--model checkpoints/organic-pbe-def2svp] [--quick]
    OMP_NUM_THREADS=1 python benchmarks/hamiltonian_speed.py --refine 5 --only water,ethanol,uracil,indole

With ``--refine K`` every size also runs ``predict --refine K`` (label ``model_refined``) beside the plain command
on the same conformers, and each SCF conformer also gets the baselines of ``_scf_baselines`` (the SCF stopped once
its H is as accurate as the refined prediction's, ``stopped_over_predict``; the density-fitted SCF,
``density_fit_over_predict``); the result goes to key ``"speed_refine"`` (the plain table under ``"speed"`` is kept);
``--key`` names another key (e.g. ``speed_refine_large`` for ``--only uracil,indole,uracil_dimer,adenine_thymine``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "hamiltonian.json"
SEED = 2026  # no data set used it
#: name -> (source, n conformers predicted in one call, n of them also run through the SCF); the same n at every
#: size, so that the command's fixed start-up is amortised alike and the ratios compare sizes, not call lengths
PLAN = {"water": ("built-in", 10, 10), "ethanol": ("built-in", 10, 10), "uracil": ("built-in", 10, 4),
        "indole": ("S22 Indole-benzene_complex_stack, the C8H7N monomer", 10, 4),
        "uracil_dimer": ("S22 Uracil_dimer_h-bonded, whole complex", 10, 2),
        "adenine_thymine": ("S22 Adenine-thymine_Watson-Crick_complex, whole base pair", 10, 2)}
WHAT = ("whole `sciml hamiltonian predict` command (subprocess wall and CPU time, one thread, all n conformers of a "
        "size in one call; stages from the command's own 'time:' line) vs the SCF of `sciml data hamiltonian` "
        "(run_molecule_scf, default SCFSettings: PBE/def2-SVP, grid level 3, conv_tol 1e-10, one thread; kernel "
        "wall and CPU) on the first n_scf of the same conformers (sigma 0.05 A, seed 2026), in one run, interleaved "
        "in rounds (each round: every predict command, then its share of the SCFs); each ratio is the median over "
        "rounds of that round's ratio. scf_over_predict = mean SCF s x n / command s (start-up amortised over n); "
        "_marginal = mean SCF s / stage s per molecule; break_even_n_10x = smallest n at which the whole command is "
        ">= 10x faster; "
        "scf_over_h0_bound = median SCF s / pyscf H0+S s per molecule")
QUICK = {"water": (3, 3), "ethanol": (2, 1), "uracil": (2, 1)}


def geometry(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Atomic numbers ``(n,)`` and positions ``(n, 3)`` Å of a :data:`PLAN` molecule."""
    from sciml.hamiltonian.data.gen_molecules import builtin_molecule

    if PLAN[name][0] == "built-in":
        return builtin_molecule(name)
    from ase.collections import s22
    from ase.neighborlist import NeighborList, natural_cutoffs
    from scipy.sparse.csgraph import connected_components

    atoms = s22[PLAN[name][0].split()[1].rstrip(",")]
    if name == "indole":  # split the stacked complex into its molecules by covalent connectivity
        nl = NeighborList(natural_cutoffs(atoms), self_interaction=False, bothways=True)
        nl.update(atoms)
        _, label = connected_components(nl.get_connectivity_matrix(sparse=True))
        atoms = next(atoms[label == k] for k in set(label) if atoms[label == k].get_chemical_formula() == "C8H7N")
    return np.asarray(atoms.numbers, dtype=np.int64), np.asarray(atoms.positions, dtype=np.float64)


def write_xyz(folder: Path, name: str, numbers, positions) -> list[Path]:
    """One ``.xyz`` per conformer (positions ``(n_conf, n_atoms, 3)`` Å); returns the paths."""
    from pymatgen.core import Element

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, pos in enumerate(positions):
        lines = [str(len(numbers)), f"{name} conformer {k}"]
        lines += [f"{Element.from_Z(int(z)).symbol} {x:.10f} {y:.10f} {w:.10f}"
                  for z, (x, y, w) in zip(numbers, pos, strict=True)]
        paths.append(folder / f"{name}_{k:02d}.xyz")
        paths[-1].write_text("\n".join(lines) + "\n")
    return paths


def time_command(model: str, paths: list[Path], out: Path, refine: int = 0) -> dict:
    """One ``sciml hamiltonian predict [--refine K]`` call on all ``paths`` (one thread): wall, CPU, its stages."""
    from sciml.cli.hamiltonian import parse_timing_line

    env = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [str(Path(sys.executable).parent / "sciml"), "hamiltonian", "predict", "--model", model, "--output", str(out),
           "--threads", "1", "--no-progress", "--refine", str(refine), *map(str, paths)]
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    stages = parse_timing_line(proc.stderr)
    if stages is None:
        raise RuntimeError(f"no 'time:' line in the command's stderr:\n{proc.stderr[-2000:]}")
    work = sum(stages.get(k, 0.0) for k in ("read", "h0_overlap", "network", "write", "refine"))
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"wall_seconds": wall, "cpu_seconds": cpu,
            "stages_seconds": stages, "startup_imports_seconds": wall - stages["load"] - work,
            "per_molecule_stage_seconds": work / len(paths)}


def time_imports() -> float:
    """Wall seconds of a fresh Python importing what the command needs (no model, no molecule)."""
    code = "import sciml.cli.main, sciml.cli.hamiltonian, sciml.hamiltonian.predict, pyscf.dft, pyscf.df"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ | {"OMP_NUM_THREADS": "1"})
    return time.perf_counter() - start


@contextmanager
def kernel_cpu(record: list):
    """Append the CPU seconds of every pyscf ``SCF.kernel`` call made inside the block to ``record``."""
    from pyscf.scf import hf

    original = hf.SCF.kernel

    def timed(self, *args, **kwargs):
        start = time.process_time()
        try:
            return original(self, *args, **kwargs)
        finally:
            record.append(time.process_time() - start)

    hf.SCF.kernel = timed
    try:
        yield
    finally:
        hf.SCF.kernel = original


def time_scf(numbers, positions, ours: list[np.ndarray] | None = None) -> dict:
    """The SCF of ``sciml data hamiltonian`` (default settings, one thread) per conformer: kernel wall and CPU.

    ``ours``: a prediction's H (pyscf order) of each conformer; then also the baselines of :mod:`_scf_baselines`
    (the SCF stopped once as accurate as ours, the density-fitted SCF) and our H MAE against the SCF.
    """
    from _scf_baselines import density_fitted_scf, stopped_seconds, traced_kernels

    from sciml.hamiltonian.data.generate import SCFSettings, run_molecule_scf

    out = {key: [] for key in ("scf_seconds", "scf_cpu_seconds", "ours_h_mae_microhartree", "stopped_seconds",
                               "stopped_cycles", "scf_cycles", "density_fit_seconds", "density_fit_h_mae_microhartree")}
    converged = []
    for k, pos in enumerate(positions):
        trace = []
        with kernel_cpu(out["scf_cpu_seconds"]), traced_kernels(trace) if ours is not None else nullcontext():
            res = run_molecule_scf(numbers, pos, SCFSettings(threads=1))
        out["scf_seconds"].append(res["scf_seconds"])
        converged.append(res["converged"])
        if ours is None:
            continue
        h = res["mats"]["H"]
        error = float(np.abs(ours[k] - h).mean() * 1e6)
        seconds, cycles = stopped_seconds(trace, h, error)
        fitted = density_fitted_scf(numbers, pos)
        out["ours_h_mae_microhartree"].append(error)
        out["stopped_seconds"].append(seconds)
        out["stopped_cycles"].append(cycles)
        out["scf_cycles"].append(res["scf_cycles"])
        out["density_fit_seconds"].append(fitted["seconds"])
        out["density_fit_h_mae_microhartree"].append(float(np.abs(fitted["H"] - h).mean() * 1e6))
        converged.append(fitted["converged"])
    return {key: value for key, value in out.items() if value} | {"converged": all(converged)}


def ratios(row: dict, key: str) -> dict:
    """Ratios of the SCF to the predict command ``row[key]`` (module docstring), each the median over rounds."""
    cmd, n = row[key], row["n_predict"]
    scf, scf_cpu = _round_means(row, "scf_seconds"), _round_means(row, "scf_cpu_seconds")
    marginal = cmd["per_molecule_stage_seconds"]
    fixed = cmd["wall_seconds"] - n * marginal  # start-up, imports, model loading
    median = float(np.median(scf))
    out = {"predict_seconds_per_molecule": cmd["wall_seconds"] / n, "predict_marginal_seconds_per_molecule": marginal,
           "predict_fixed_seconds": fixed,
           "scf_over_predict": _median_ratio(scf * n, cmd["rounds_wall_seconds"]),
           "scf_over_predict_cpu": _median_ratio(scf_cpu * n, cmd["rounds_cpu_seconds"]),
           "scf_over_predict_rounds": (scf * n / np.asarray(cmd["rounds_wall_seconds"])).tolist(),
           "scf_over_predict_marginal": _median_ratio(scf, cmd["rounds_stage_seconds"]),
           "scf_over_h0_bound": float(np.median(row["scf_seconds"])) / (cmd["stages_seconds"]["h0_overlap"] / n)}
    out["break_even_n_10x"] = math.ceil(10 * fixed / (median - 10 * marginal)) if median > 10 * marginal else None
    for base in ("stopped", "density_fit"):  # the SCF baselines of a refined run (_scf_baselines)
        if f"{base}_seconds" in row:
            out[f"{base}_over_predict"] = _median_ratio(_round_means(row, f"{base}_seconds") * n,
                                                        cmd["rounds_wall_seconds"])
    return out


def _round_means(row: dict, key: str) -> np.ndarray:
    """Mean of ``row[key]`` (one value per SCF conformer) within each round (``row["scf_round"]``)."""
    values, rounds = np.asarray(row[key]), np.asarray(row["scf_round"])
    return np.array([values[rounds == r].mean() for r in range(rounds.max() + 1)])


def _median_ratio(numerators, denominators) -> float:
    """Median over rounds of numerator / denominator (arrays of one value per round)."""
    return float(np.median(np.asarray(numerators) / np.asarray(denominators)))


def measure(name: str, n: int, n_scf: int, models: dict, work: Path, rounds: int = 3) -> dict:
    """One size: fresh conformers, timed in ``rounds`` rounds (module docstring).

    Each round runs every model's predict command on all ``n`` conformers, then the SCF on its share of the first
    ``n_scf``, so that each ratio compares timings taken minutes apart, not a run apart.

    The reported command (stages, wall) is the round of median wall time; ``rounds_*`` keep every round.
    """
    from pyscf import gto

    from sciml.hamiltonian.data.gen_molecules import displaced_conformers

    numbers, ref = geometry(name)
    positions = displaced_conformers(ref, n, 0.05, SEED)
    paths = write_xyz(work / name, name, numbers, positions)
    mol = gto.M(atom=[(int(z), tuple(p)) for z, p in zip(numbers, ref, strict=True)], basis="def2-svp", verbose=0)
    row = {"molecule": name, "source": PLAN[name][0], "formula": _formula(numbers),
           "n_atoms": int(len(numbers)), "n_ao": int(mol.nao), "n_predict": n, "n_scf": n_scf,
           "scf_seconds": [], "scf_cpu_seconds": [], "scf_round": [], "converged": True}
    runs = {label: [] for label in models}
    for r, share in enumerate(np.array_split(np.arange(n_scf), min(rounds, n_scf))):
        for label, (model, refine) in models.items():
            runs[label].append(time_command(model, paths, work / f"{name}-{label}-out", refine))
        refined = work / f"{name}-model_refined-out"
        ours = ([np.load(refined / paths[k].stem / "hamiltonian.npy") for k in share]
                if "model_refined" in models else None)
        scf = time_scf(numbers, positions[share], ours)
        for key, values in scf.items():
            if key != "converged":
                row.setdefault(key, []).extend(values)
        row["scf_round"] += [r] * len(share)
        row["converged"] &= scf["converged"]
    for label, timed in runs.items():
        walls = [t["wall_seconds"] for t in timed]
        row[f"predict_{label}"] = timed[int(np.argsort(walls)[len(walls) // 2])] | {
            "rounds_wall_seconds": walls, "rounds_cpu_seconds": [t["cpu_seconds"] for t in timed],
            "rounds_stage_seconds": [t["per_molecule_stage_seconds"] for t in timed]}
        row[f"ratios_{label}"] = ratios(row, f"predict_{label}")
    return row


def _formula(numbers) -> str:
    from ase import Atoms

    return Atoms(numbers=[int(z) for z in numbers]).get_chemical_formula()


def table(rows: list[dict], label: str) -> str:
    """Markdown table of one model's rows (seconds per molecule unless said)."""
    lines = ["| molecule | atoms | AOs | n (SCF) | SCF s/mol | predict cmd s (all n) | start-up+imports s | load s | "
             "H0+S s/mol | network s/mol | refine s/mol | read+write s/mol | predict s/mol (cmd/n) | "
             "SCF / predict | SCF / predict, CPU | SCF / predict, marginal | n for 10x | SCF / (H0+S) bound |",
             "|" + "---|" * 18]
    for r in rows:
        if f"predict_{label}" not in r:
            continue
        c, q, n = r[f"predict_{label}"], r[f"ratios_{label}"], r["n_predict"]
        s = c["stages_seconds"]
        lines.append(" | ".join([
            f"| {r['molecule']} ({r['formula']})", str(r["n_atoms"]), str(r["n_ao"]), f"{n} ({r['n_scf']})",
            f"{np.mean(r['scf_seconds']):.2f}", f"{c['wall_seconds']:.2f}", f"{c['startup_imports_seconds']:.2f}",
            f"{s['load']:.2f}", f"{s['h0_overlap'] / n:.3f}", f"{s['network'] / n:.3f}",
            f"{s.get('refine', 0.0) / n:.3f}", f"{(s['read'] + s['write']) / n:.3f}",
            f"{q['predict_seconds_per_molecule']:.2f}",
            f"{q['scf_over_predict']:.1f}x", f"{q['scf_over_predict_cpu']:.1f}x",
            f"{q['scf_over_predict_marginal']:.1f}x",
            str(q["break_even_n_10x"] or "never"), f"{q['scf_over_h0_bound']:.1f}x |"]))
    return "\n".join(lines)


def grows(rows: list[dict], label: str, key: str) -> bool:
    """Whether ratio ``key`` of model ``label`` increases with the number of atoms (every step)."""
    vals = [r[f"ratios_{label}"][key] for r in sorted(rows, key=lambda r: r["n_atoms"]) if f"ratios_{label}" in r]
    return bool(all(b > a for a, b in zip(vals[:-1], vals[1:], strict=True)))


def main() -> None:
    """Measure every size, print the tables, merge ``speed`` into the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(ROOT / "checkpoints" / "organic-pbe-def2svp"),
                        help="H/C/N/O model artifact (default: the shipped organic model)")
    parser.add_argument("--water-model", default=str(ROOT / "checkpoints" / "water-pbe-def2svp"))
    parser.add_argument("--only", default=None, help="comma-separated subset of: " + ", ".join(PLAN))
    parser.add_argument("--quick", action="store_true", help="water, ethanol, uracil, 1-3 conformers (a smoke run)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave the results file alone")
    parser.add_argument("--note", default=None, help="what the model is, stored with the results (e.g. a stand-in)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of [predict commands, a share of the SCFs] per size; ratios are medians over them")
    parser.add_argument("--refine", type=int, default=0, metavar="K",
                        help="also time `predict --refine K` (model_refined) in the same run; key 'speed_refine'")
    parser.add_argument("--key", default=None, help="results key to write (default: speed, or speed_refine)")
    args = parser.parse_args()
    if not Path(args.model, "config.yaml").is_file():
        raise SystemExit(f"{args.model}: no model artifact (config.yaml); train and export it, or pass --model")
    os.environ["OMP_NUM_THREADS"] = "1"
    from sciml.hamiltonian.scf.blas import pyscf_blas_core
    from sciml.hamiltonian.scf.h0 import import_pyscf

    import_pyscf()  # the SCFs here and the predict commands load pyscf's OpenBLAS the same way (scf.blas)
    from pyscf import lib

    lib.num_threads(1)
    names = list(QUICK) if args.quick else (args.only.split(",") if args.only else list(PLAN))
    load_before, start = os.getloadavg(), time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        imports = time_imports()
        for name in names:
            n, n_scf = QUICK[name] if args.quick else PLAN[name][1:]
            models = ({"model": (args.model, 0)} | ({"model_refined": (args.model, args.refine)} if args.refine else {})
                      | ({"water_model": (args.water_model, 0)} if name == "water" and not args.refine else {}))
            rows.append(measure(name, n, n_scf, models, Path(tmp), args.rounds))
            print(f"{name}: done ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
    model_meta = json.loads(Path(args.model, "metadata.json").read_text())
    result = {
        "what": WHAT,
        "model": str(Path(args.model).resolve().relative_to(ROOT)) if Path(args.model).resolve().is_relative_to(ROOT)
        else str(args.model), "model_data_hash": model_meta.get("data_hash"), "model_note": args.note,
        "model_is_shipped_organic": Path(args.model).resolve() == (ROOT / "checkpoints" / "organic-pbe-def2svp"),
        "water_model": str(Path(args.water_model).name), "threads": 1, "cpus": os.cpu_count(),
        "machine": platform.processor() or platform.machine(), "pyscf_blas_core": pyscf_blas_core(), "seed": SEED,
        "sigma_angstrom": 0.05,
        "load_average_before": list(load_before), "load_average_after": list(os.getloadavg()),
        "python_imports_seconds": imports, "rounds": args.rounds, "seconds": time.perf_counter() - start,
        "quick": args.quick,
        "ratio_grows_with_size": grows(rows, "model", "scf_over_predict"),
        "marginal_ratio_grows_with_size": grows(rows, "model", "scf_over_predict_marginal"),
        "refine_steps": args.refine, "molecules": rows,
    }
    if args.refine:
        result["refined_ratio_grows_with_size"] = grows(rows, "model_refined", "scf_over_predict")
    print(table(rows, "model"))
    if args.refine:
        print(f"\nmodel, --refine {args.refine}:\n" + table(rows, "model_refined"))
    print("\nwater model:\n" + table(rows, "water_model"))
    print(f"threads 1, {os.cpu_count()} CPUs, load average before {load_before[0]:.2f}, after "
          f"{os.getloadavg()[0]:.2f}; ratio grows with size: {result['ratio_grows_with_size']} (whole command), "
          f"{result['marginal_ratio_grows_with_size']} (marginal)")
    if not args.no_write:
        from sciml.core.io.atomic import atomic_write_text

        data = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}  # re-read: another script writes here
        key = args.key or ("speed_refine" if args.refine else "speed")
        data[key] = result
        atomic_write_text(RESULTS, json.dumps(data, indent=1) + "\n")
        print(f"wrote key {key!r} of {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
