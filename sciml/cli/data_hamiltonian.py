"""``sciml data hamiltonian``: pyscf Hamiltonians (H, H0, S) of molecules or small crystals.

Examples
--------
``sciml data hamiltonian --molecule water --n 200 --out runs/data/water``
``sciml data hamiltonian --xyz traj.xyz --out runs/data/traj --format both``
``sciml data hamiltonian --molecule water --n 50 --sigma 0.03 --sigma-max 0.10 --rotate --out runs/data/broad``
``sciml data hamiltonian --molecule g2-train --n 8 --sigma 0.02 --sigma-max 0.10 --rotate --h0 fast --out runs/data/g2``
``sciml data hamiltonian --crystal Si --kmesh 2 2 2 --n 3 --out runs/data/si``
``sciml data hamiltonian --source qm9 --n 3000 --seed 0 --shard 0/10 --workers 4 --out runs/data/qm9``

"""

from __future__ import annotations

import sys
from pathlib import Path


def add_parser(sub, name: str) -> None:
    """Register the ``hamiltonian`` sub-verb of ``sciml data``."""
    p = sub.add_parser(name, help="pyscf Hamiltonians of molecules or crystals (resumable, atomic writes)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--molecule", help="built-in molecule(s), comma-separated: water, ethanol, malondialdehyde, "
                     "uracil, any closed-shell H/C/N/O name of ASE's G2 (e.g. C6H6), or the lists g2-organic, "
                     "g2-train, g2-holdout, md17-holdout, s22-monomers (aromatic monomers of ASE's S22: 2-pyridone, "
                     "2-aminopyridine, adenine, pyrazine, indole, phenol), smiles-organic (60 more, embedded by "
                     "rdkit: sciml.hamiltonian.data.smiles), smiles-large (10-14 heavy atoms, H/C/N/O/F: a size "
                     "test set) (one npz per molecule)")
    src.add_argument("--xyz", help="xyz file (Å); several frames = a trajectory, one frame = displace it")
    src.add_argument("--crystal", help="built-in crystal: Si, C (diamond)")
    src.add_argument("--source", choices=["qm9"],
                     help="qm9: QM9 molecules (package qm9pack) at their QM9 geometries, one npz per molecule, "
                     "sharded (--shard), with a checksummed manifest.json per shard")
    p.add_argument("--out", required=True, help="output folder (reused to resume)")
    p.add_argument("--n", type=int, default=None, help="conformers/structures (default 10; all frames for --xyz); "
                   "--source qm9: molecules drawn by --seed (default all that pass --max-heavy-atoms)")
    p.add_argument("--indices", help="--source qm9: QM9 indices instead of a draw, e.g. 1,2,5-9 (1 = CH4)")
    p.add_argument("--max-heavy-atoms", type=int, default=None, help="--source qm9: only molecules with at most "
                   "this many heavy (non-H) atoms")
    p.add_argument("--shard", default="0/1", help="--source qm9: shard i/k (i from 0 to k-1) of the selection, "
                   "written to OUT/shard-0000i-of-0000k (OUT itself for 0/1)")
    p.add_argument("--sigma", type=float, default=None,
                   help="Gaussian displacement per coordinate, Å (default 0.05 molecules, 0.03 crystals)")
    p.add_argument("--sigma-max", type=float, default=None,
                   help="molecules: draw each conformer's σ uniformly in [--sigma, --sigma-max] Å (a broader set)")
    p.add_argument("--rotate", action="store_true",
                   help="molecules: turn each conformer by a uniformly random rotation (random orientation)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--xc", default="pbe", help="functional, or 'hf' (default pbe)")
    p.add_argument("--basis", default=None, help="basis (default def2-svp; gth-szv for crystals)")
    p.add_argument("--h0", choices=["full", "fast"], default="full",
                   help="how H0 is built: full (exact Coulomb, SCF grid) or fast (density-fitted Coulomb, grid "
                   "level 1; several times cheaper); the model must be trained on the H0 it predicts from")
    p.add_argument("--conv-tol", type=float, default=1e-10, help="SCF energy tolerance, Hartree")
    p.add_argument("--grid-level", type=int, default=3, help="molecules: DFT grid level of the SCF (default 3, "
                   "the reference; lower is cheaper and allowed only where its H error was measured within 10 µHa: "
                   "sciml.hamiltonian.data.cheap)")
    p.add_argument("--density-fit", action="store_true", help="molecules: density-fitted SCF (cheaper, not the "
                   "reference settings; allowed where measured within 10 µHa)")
    p.add_argument("--final-build", action="store_true", help="molecules, with cheap settings: store the "
                   "reference-settings Fock matrix of the cheap SCF's density (one exact build)")
    p.add_argument("--seed-model", default=None, help="--source qm9: start each SCF from the density of this "
                   "molecule model's predicted H (name or folder, same basis) instead of the minao guess")
    p.add_argument("--seed-refine", type=int, default=0, metavar="K", help="--seed-model: refine the predicted H "
                   "by K of the model's Fock builds (Newton steps, as predict --refine K) before taking its density; "
                   "2 saved 3-4 of 9-13 SCF cycles on QM9 molecules")
    p.add_argument("--skip-release", default=None, help="--source qm9: leave out the molecules this release "
                   "folder (sciml data release, same settings) already holds, e.g. datasets/qm9/release")
    p.add_argument("--retry-failed", action="store_true", help="--source qm9: compute again the molecules a "
                   "previous run listed in failed.json")
    p.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto", help="molecules: run the SCF with "
                   "gpu4pyscf when it imports and CUDA sees a GPU (auto), or force cpu/gpu")
    p.add_argument("--format", choices=["npz", "deeph", "both"], default=None,
                   help="npz (shared format) and/or DeepH folders (default npz; deeph for crystals)")
    p.add_argument("--workers", type=int, default=1, help="processes running SCFs in parallel")
    p.add_argument("--threads", type=int, default=1, help="threads per pyscf process")
    p.add_argument("--kmesh", type=int, nargs=3, default=[2, 2, 2], help="crystal SCF k-mesh")
    p.add_argument("--fock-kmesh", type=int, nargs=3, default=None,
                   help="k-mesh of the non-SCF Fock builds Fourier-transformed to H(R) (default: max(6, kmesh))")
    p.add_argument("--cutoff", type=float, default=14.0, help="crystal pair cutoff for H(R), S(R) blocks, Å")
    p.add_argument("--pseudo", default="gth-pbe", help="crystal pseudopotential")
    p.add_argument("--ke-cutoff", type=float, default=None,
                   help="crystal plane-wave kinetic-energy cutoff, Hartree (default: pyscf's from its precision)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(run=run)


def run(args, overrides: list[str]) -> int:
    """Build the job list, run what is missing, print where the outputs went."""
    if args.workers < 1 or args.threads < 1:
        raise ValueError("--workers and --threads must be >= 1")
    if args.n is not None and args.n < 1:
        raise ValueError(f"--n must be >= 1, got {args.n}")
    if args.crystal:
        return _run_crystal(args)
    from sciml.hamiltonian.data.generate import SCFSettings, generate_molecules, scf_device

    scf_device(args.device)  # --device gpu without a GPU fails here, before any work
    settings = SCFSettings(xc=args.xc, basis=args.basis or "def2-svp", conv_tol=args.conv_tol, threads=args.threads,
                           h0=args.h0, grid_level=args.grid_level, density_fit=args.density_fit, device=args.device,
                           final_build=args.final_build)
    if args.source == "qm9":
        return _run_qm9(args, settings)
    if args.indices or args.max_heavy_atoms is not None or args.shard != "0/1":
        raise ValueError("--indices, --max-heavy-atoms and --shard select QM9 molecules; use them with --source qm9")
    if args.seed_model or args.seed_refine or args.retry_failed or args.skip_release:
        raise ValueError("--seed-model, --seed-refine, --skip-release and --retry-failed apply to --source qm9")
    jobs = _molecule_jobs(args)
    fmt = args.format or "npz"
    formats = ("npz", "deeph") if fmt == "both" else (fmt,)
    res = generate_molecules(jobs, settings, args.out, formats, args.workers, progress=not args.no_progress)
    names = ", ".join(sorted({j.name for j in jobs}))
    print(f"{names}: {res['computed']} computed, {res['skipped']} already done; wrote {', '.join(res['files'])}",
          file=sys.stderr)
    return 0


def _run_qm9(args, settings) -> int:
    from sciml.hamiltonian.data.cheap import check_cheap
    from sciml.hamiltonian.data.gen_qm9 import generate_qm9_shard, shard_folder
    from sciml.hamiltonian.data.qm9 import parse_indices, parse_shard, qm9_molecules, select_indices, shard_indices

    check_cheap(settings)  # before reading QM9 or loading a model
    i, k = parse_shard(args.shard)
    guess = None
    if args.seed_refine and not args.seed_model:
        raise ValueError("--seed-refine refines the prediction of --seed-model; give --seed-model too")
    if args.seed_model:
        from sciml.hamiltonian.seed import ModelGuess

        guess = ModelGuess(args.seed_model, settings.basis, args.seed_refine)
    indices = parse_indices(args.indices) if args.indices else None
    selected = select_indices(args.n, args.seed, indices, args.max_heavy_atoms)
    mine = shard_indices(selected, i, k)
    drawn = {"indices": args.indices} if indices else {"n": args.n, "seed": args.seed}
    selection = {**drawn, "max_heavy_atoms": args.max_heavy_atoms, "n_selected": len(selected), "shard": [i, k]}
    if args.skip_release:
        from sciml.hamiltonian.data.generate import settings_record
        from sciml.hamiltonian.data.release import released_indices

        released = released_indices(args.skip_release, settings_record(settings))
        selection["in_release"] = sum(j in released for j in mine)
        mine = [j for j in mine if j not in released]
    if args.seed_model:
        selection["seed_model"] = args.seed_model
    if args.seed_refine:
        selection["seed_refine"] = args.seed_refine
    res = generate_qm9_shard(qm9_molecules(mine), settings, shard_folder(args.out, i, k), args.workers,
                             progress=not args.no_progress, selection=selection, guess=guess,
                             retry_failed=args.retry_failed)
    if mine and res["failed"] == len(mine):
        raise RuntimeError(f"qm9 shard {i}/{k}: all {len(mine)} molecule(s) failed, nothing written (the first: "
                           f"{_first_failure(res['failed_file'])}; all reasons in {res['failed_file']}); fix the "
                           "settings and rerun with --retry-failed")
    failed = f", {res['failed']} failed (listed in {res['failed_file']})" if res["failed"] else ""
    print(f"qm9 shard {i}/{k}: {res['computed']} computed, {res['skipped']} already done (skipped){failed}; "
          f"wrote {res['folder']} and {res['manifest']}", file=sys.stderr)
    return 0


def _first_failure(path: str) -> str:
    """``QM9 <index> (<formula>): <reason>`` of the first molecule listed in a shard's ``failed.json``."""
    import json

    try:
        first = json.loads(Path(path).read_text())["molecules"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return "unreadable failed.json"
    reason = (str(first.get("reason") or "").strip() or "no reason recorded").splitlines()[0]
    return f"QM9 {first.get('index')} ({first.get('formula', '?')}): {reason}"


def _molecule_jobs(args) -> list:
    """One job per conformer. Several molecules: each gets its own conformer seed (``molecule_seed``)."""
    from sciml.hamiltonian.data.gen_molecules import (
        builtin_molecule,
        displaced_conformers,
        molecule_seed,
        read_xyz_frames,
        resolve_molecules,
    )
    from sciml.hamiltonian.data.generate import MoleculeJob

    sigma = 0.05 if args.sigma is None else args.sigma
    if args.molecule:
        names = resolve_molecules(args.molecule)
        sources = [(name, *builtin_molecule(name)) for name in names]
        seeds = [args.seed] if len(names) == 1 else [molecule_seed(args.seed, n) for n in names]
        sources = [(name, numbers, displaced_conformers(base, args.n or 10, sigma, seed, sigma_max=args.sigma_max,
                                                        rotate=args.rotate))
                   for (name, numbers, base), seed in zip(sources, seeds, strict=True)]
    else:
        numbers, frames = read_xyz_frames(args.xyz)
        if len(frames) == 1:
            frames = displaced_conformers(frames[0], args.n or 10, sigma, args.seed, sigma_max=args.sigma_max,
                                          rotate=args.rotate)
        elif args.n:
            frames = frames[: args.n]
        sources = [(Path(args.xyz).stem, numbers, frames)]
    return [MoleculeJob(name, k, tuple(int(z) for z in numbers), tuple(map(tuple, f.tolist())))
            for name, numbers, frames in sources for k, f in enumerate(frames)]


def _run_crystal(args) -> int:
    from sciml.hamiltonian.data.gen_crystal import CrystalSettings, generate_crystals

    if args.format == "npz":
        raise ValueError("crystals are written as DeepH folders (H(R) blocks); use --format deeph")
    fock = args.fock_kmesh or [max(6, k) for k in args.kmesh]
    settings = CrystalSettings(xc=args.xc, basis=args.basis or "gth-szv", pseudo=args.pseudo,
                               kmesh=tuple(args.kmesh), fock_kmesh=tuple(fock), cutoff=args.cutoff,
                               conv_tol=args.conv_tol, threads=args.threads, ke_cutoff=args.ke_cutoff)
    sigma = 0.03 if args.sigma is None else args.sigma
    res = generate_crystals(args.crystal, args.n or 3, sigma, args.seed, settings, args.out, args.workers,
                            progress=not args.no_progress)
    print(f"{args.crystal}: {res['computed']} computed, {res['skipped']} already done; wrote {res['folder']}",
          file=sys.stderr)
    return 0
