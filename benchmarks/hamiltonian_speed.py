"""End-to-end speed of ``sciml hamiltonian predict`` against the pyscf SCF, side by side in one run (issue 15, item 4).

For each molecule (water with the shipped model; ethanol with a model given by ``--ethanol-model``, e.g. a short
``sciml fit`` + ``sciml export --calibrate`` of ``configs/hamiltonian/ethanol.yaml``) on fresh conformers
(``displaced_conformers``, σ = 0.05 Å, a seed the data never used), timed in this one run, one thread
(``OMP_NUM_THREADS=1``):

- ``predict_wall``: the whole ``sciml hamiltonian predict`` command, all conformers in one call (subprocess wall
  time: Python start-up, imports, model loading, pyscf H0/S, network, writing the output folders);
- the same pipeline in-process, stage by stage with the functions the command uses: model loading, pyscf H0 + S
  build (per conformer), one network call for all conformers, writing the folders;
- the SCF that ``sciml data hamiltonian`` runs for the same geometries (``run_molecule_scf`` with the default
  ``SCFSettings``: same basis, functional, grid level 3, conv_tol 1e-10), its kernel time and its whole call.

``--bound-only uracil``: molecules without a model get the SCF and the H0 + S build alone (an upper bound of the
end-to-end ratio, SCF / H0+S build; not a measurement of ``predict``).
Merges key ``"speed"`` into ``benchmarks/results/hamiltonian.json`` (other keys kept) and prints a table.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/hamiltonian_speed.py --ethanol-model /tmp/eth-model [--water 5] [--ethanol 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "hamiltonian.json"
SEED = 2026  # the shipped data used seed 1


def write_xyz(folder: Path, name: str, numbers, positions) -> list[Path]:
    """One ``.xyz`` per conformer (positions ``(n_conf, n_atoms, 3)`` Å); returns the paths."""
    from pymatgen.core import Element

    paths = []
    for k, pos in enumerate(positions):
        lines = [str(len(numbers)), f"{name} conformer {k}"]
        lines += [f"{Element.from_Z(int(z)).symbol} {x:.10f} {y:.10f} {w:.10f}"
                  for z, (x, y, w) in zip(numbers, pos, strict=True)]
        path = folder / f"{name}_{k:02d}.xyz"
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    return paths


def time_command(model: str, paths: list[Path], out: Path) -> float:
    """Wall seconds of one ``sciml hamiltonian predict`` call on all ``paths`` (one thread)."""
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    cmd = [str(Path(sys.executable).parent / "sciml"), "hamiltonian", "predict", "--model", model, "--output", str(out),
           "--threads", "1", "--no-progress", *map(str, paths)]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def time_imports() -> float:
    """Wall seconds of a fresh Python importing what the command needs (torch, lightning, e3nn, pyscf, pymatgen)."""
    code = ("import sciml.cli.main, sciml.hamiltonian.predict, sciml.hamiltonian.module, pyscf.dft, "
            "pymatgen.core, sciml.hamiltonian.data.deeph")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ | {"OMP_NUM_THREADS": "1"})
    return time.perf_counter() - start


def load_without_fast_build(model: str) -> float:
    """Seconds of the previous ``load_model`` (e3nn modules built with opt_einsum_fx planning), for before/after."""
    from sciml.core.io.artifact import load_artifact
    from sciml.hamiltonian.artifact import module_config
    from sciml.hamiltonian.module import HamiltonianModule

    start = time.perf_counter()
    art = load_artifact(model)
    module = HamiltonianModule(**module_config(art.config, dict(art.metadata or {}), model))
    module.load_state_dict(art.state_dict, strict=True)
    return time.perf_counter() - start


def h0_variants(numbers, positions) -> dict:
    """Cheaper H0 builds, one conformer: seconds and max |H0 - exact H0| (µHa).

    Density-fitted J (def2-universal-jfit) and/or grid level 1: NOT what the models were trained on (a model
    would have to be retrained on such H0); measured to show what a cheaper H0 would buy.
    """
    from pyscf import dft, gto

    mol = gto.M(atom=[(int(z), tuple(p)) for z, p in zip(numbers, positions, strict=True)], basis="def2-svp",
                unit="Angstrom", verbose=0)

    def build(df: bool, level: int):
        mf = dft.RKS(mol)
        mf.xc, mf.grids.level, mf.verbose = "pbe", level, 0
        if df:
            mf = mf.density_fit(auxbasis="def2-universal-jfit")
        start = time.perf_counter()
        h0 = mf.get_fock(dm=mf.get_init_guess(key="minao"))
        return h0, time.perf_counter() - start

    exact, t0 = build(False, 3)
    out = {"exact_seconds": t0}
    for name, df, level in (("df_j", True, 3), ("grid1", False, 1), ("df_j_grid1", True, 1)):
        h0, sec = build(df, level)
        out[name] = {"seconds": sec, "max_abs_diff_microhartree": float(np.abs(h0 - exact).max() * 1e6)}
    return out


def time_stages(model: str, paths: list[Path], out: Path) -> dict:
    """The command's pipeline in-process, stage by stage (seconds): load, H0+S per conformer, network, write."""
    import torch

    from sciml.hamiltonian.artifact import load_model
    from sciml.hamiltonian.predict import (
        check_elements,
        predict_structures,
        read_xyz,
        structure_from_matrices,
        write_prediction,
        zeroth_step,
    )

    torch.set_num_threads(1)
    before, after = [], []
    for _ in range(2):  # alternate, best of two each: the first build also fills e3nn's caches
        before.append(load_without_fast_build(model))
        start = time.perf_counter()
        predictor = load_model(model)
        after.append(time.perf_counter() - start)
    load = min(after)
    structures, overlaps, h0s = [], [], []
    for path in paths:
        start = time.perf_counter()
        numbers, positions = read_xyz(path)
        check_elements(numbers, predictor.layout, str(path))
        mats = zeroth_step(numbers, positions, predictor.basis, predictor.xc, predictor.layout, str(path))
        structures.append(structure_from_matrices(numbers, positions, mats, predictor.layout, mats["n_occupied"],
                                                  str(path)))
        overlaps.append(mats["S"])
        h0s.append(time.perf_counter() - start)
    start = time.perf_counter()
    results = predict_structures(structures, predictor)
    network = time.perf_counter() - start
    start = time.perf_counter()
    for path, s, res, ovl in zip(paths, structures, results, overlaps, strict=True):
        write_prediction(out / path.stem, s, res, ovl, predictor)
    write = time.perf_counter() - start
    return {"load_model_seconds": load, "load_model_seconds_before_fast_build": min(before),
            "h0_overlap_seconds_per_conformer": h0s, "network_seconds_all": network,
            "write_seconds_all": write}


def time_scf(numbers, positions) -> dict:
    """The SCF of ``sciml data hamiltonian`` (default settings, one thread) per conformer: kernel and whole call."""
    from sciml.hamiltonian.data.generate import SCFSettings, run_molecule_scf

    kernel, whole, converged = [], [], []
    for pos in positions:
        start = time.perf_counter()
        res = run_molecule_scf(numbers, pos, SCFSettings(threads=1))
        whole.append(time.perf_counter() - start)
        kernel.append(res["scf_seconds"])
        converged.append(res["converged"])
    return {"scf_kernel_seconds_per_conformer": kernel, "scf_call_seconds_per_conformer": whole,
            "converged": all(converged)}


def time_h0_only(numbers, positions) -> list[float]:
    """H0 + S build alone per conformer (seconds), for molecules without a model (def2-SVP, PBE)."""
    from pyscf import gto

    from sciml.hamiltonian.orbitals import OrbitalLayout
    from sciml.hamiltonian.predict import zeroth_step

    mol = gto.M(atom=[(int(z), tuple(p)) for z, p in zip(numbers, positions[0], strict=True)], basis="def2-svp",
                unit="Angstrom", verbose=0)
    layout = OrbitalLayout.from_pyscf_mol(mol)
    out = []
    for pos in positions:
        start = time.perf_counter()
        zeroth_step(numbers, pos, "def2-svp", "pbe", layout)
        out.append(time.perf_counter() - start)
    return out


def measure(name: str, model: str | None, n: int, work: Path) -> dict:
    """One molecule: fresh conformers, predict (command + stages) and SCF, side by side."""
    from sciml.hamiltonian.data.gen_molecules import builtin_molecule, displaced_conformers

    numbers, ref = builtin_molecule(name)
    positions = displaced_conformers(ref, n, 0.05, SEED)
    folder = work / name
    folder.mkdir()
    paths = write_xyz(folder, name, numbers, positions)
    row = {"molecule": name, "n_atoms": int(len(numbers)), "n_conformers": n, "model": model}
    if model is not None:
        row["predict_command_seconds_all"] = time_command(model, paths, work / f"{name}-cmd")
        row["python_start_and_imports_seconds"] = time_imports()
        row |= time_stages(model, paths, work / f"{name}-stages")
    else:
        row["h0_overlap_seconds_per_conformer"] = time_h0_only(numbers, positions)
    row |= time_scf(numbers, positions)
    row["h0_variants_one_conformer"] = h0_variants(numbers, positions[0])
    scf = float(np.sum(row["scf_kernel_seconds_per_conformer"]))
    h0 = float(np.sum(row["h0_overlap_seconds_per_conformer"]))
    if model is not None:
        total = row["predict_command_seconds_all"]
        row["ratio_scf_over_predict_command"] = scf / total
        row["ratio_scf_over_predict_without_startup"] = scf / (h0 + row["network_seconds_all"]
                                                               + row["write_seconds_all"])
    # median per conformer: the first pyscf build of a process pays one-time set-up (uracil: 2.6 s cold, 2.0 s warm)
    row["ratio_scf_over_h0_overlap_bound"] = (float(np.median(row["scf_kernel_seconds_per_conformer"]))
                                              / float(np.median(row["h0_overlap_seconds_per_conformer"])))
    return row


def n_ao(name: str) -> int:
    """Number of def2-SVP atomic orbitals of a built-in molecule."""
    from pyscf import gto

    from sciml.hamiltonian.data.gen_molecules import builtin_molecule

    numbers, pos = builtin_molecule(name)
    atom = [(int(z), tuple(p)) for z, p in zip(numbers, pos, strict=True)]
    return int(gto.M(atom=atom, basis="def2-svp", unit="Angstrom", verbose=0).nao)


def table(rows: list[dict]) -> str:
    """Markdown table of the measured rows (mean seconds per conformer; network/write/load for the whole call)."""
    lines = ["| molecule | atoms | AOs | n | SCF s/conf | predict cmd s (all n) | start+imports s | load s (before) | "
             "H0+S s/conf | network s (all n) | write s (all n) | SCF / predict | SCF / predict w/o start+load | "
             "SCF / (H0+S) bound (medians) |", "|" + "---|" * 14]

    def fmt(row, key, form="{:.2f}"):
        return form.format(row[key]) if key in row else "–"

    for r in rows:
        load = "–"
        if "load_model_seconds" in r:
            load = f"{r['load_model_seconds']:.2f} ({r['load_model_seconds_before_fast_build']:.2f})"
        lines.append(" | ".join([
            f"| {r['molecule']}", str(r["n_atoms"]), str(r["n_ao"]), str(r["n_conformers"]),
            f"{np.mean(r['scf_kernel_seconds_per_conformer']):.2f}", fmt(r, "predict_command_seconds_all"),
            fmt(r, "python_start_and_imports_seconds"), load,
            f"{np.mean(r['h0_overlap_seconds_per_conformer']):.2f}", fmt(r, "network_seconds_all"),
            fmt(r, "write_seconds_all"), fmt(r, "ratio_scf_over_predict_command", "{:.2f}×"),
            fmt(r, "ratio_scf_over_predict_without_startup", "{:.2f}×"),
            f"{r['ratio_scf_over_h0_overlap_bound']:.1f}× |"]))
    return "\n".join(lines)


def main() -> None:
    """Measure, print the table, merge ``speed`` into the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--water", type=int, default=5, help="water conformers")
    parser.add_argument("--ethanol", type=int, default=3, help="ethanol conformers")
    parser.add_argument("--ethanol-model", default=None, help="exported ethanol artifact (not shipped)")
    parser.add_argument("--bound-only", nargs="*", default=[], help="molecules timed for SCF and H0+S only")
    parser.add_argument("--bound-n", type=int, default=1, help="conformers of each --bound-only molecule")
    parser.add_argument("--no-write", action="store_true", help="print only; leave the results file alone")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    from pyscf import lib

    lib.num_threads(1)
    load_before = os.getloadavg()
    start = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        plan = [("water", str(ROOT / "checkpoints" / "water-pbe-def2svp"), args.water)]
        if args.ethanol_model:
            plan.append(("ethanol", args.ethanol_model, args.ethanol))
        plan += [(name, None, args.bound_n) for name in args.bound_only]
        for name, model, n in plan:
            row = measure(name, model, n, work)
            row["n_ao"] = n_ao(name)
            rows.append(row)
            print(f"{name}: done", file=sys.stderr, flush=True)
    result = {
        "what": ("end-to-end `sciml hamiltonian predict` (subprocess wall time, all conformers in one call) vs the "
                 "pyscf SCF of `sciml data hamiltonian` (kernel time, default SCFSettings: PBE/def2-SVP, grid level "
                 "3, conv_tol 1e-10) on the same fresh conformers (sigma 0.05 A, seed 2026), one run, one thread; "
                 "stages timed in-process with the functions the command uses. SCF/predict = total SCF seconds / "
                 "command seconds; SCF/(H0+S) = median SCF / median H0+S build per conformer, the upper bound of "
                 "any predict that builds H0 this way"),
        "threads": 1, "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
        "load_average_before": list(load_before), "load_average_after": list(os.getloadavg()),
        "seconds": time.perf_counter() - start,
        "ethanol_model": ("not shipped: a short training of configs/hamiltonian/ethanol.yaml exported to a temporary "
                          "folder; its accuracy does not matter for speed (same network size as the benchmark's)"
                          if args.ethanol_model else None),
        "molecules": rows,
    }
    print(table(rows))
    print(f"threads 1, {os.cpu_count()} CPUs, load average before {load_before[0]:.2f}, after "
          f"{os.getloadavg()[0]:.2f}")
    if not args.no_write:
        from sciml.core.io.atomic import atomic_write_text

        data = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
        data["speed"] = result
        atomic_write_text(RESULTS, json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
