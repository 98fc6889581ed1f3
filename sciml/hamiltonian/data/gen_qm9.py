"""Sharded, resumable, checksummed QM9 Hamiltonian shards (``sciml data hamiltonian --source qm9``).

A shard is a folder: one zlib-compressed npz per molecule (``qm9_000001.npz``, the shared one-conformer format
written atomically by :func:`sciml.hamiltonian.data.generate.compute_molecule_npz`, the same SCF as every molecule
source; float64, lossless), the level of theory (``qm9.settings.json``: a rerun with other settings is refused),
``manifest.json`` (each molecule's QM9 index, SMILES, formula, file, sha256, SCF cycles and start; the settings, the
selection and one ``data_sha256`` over all files), ``failed.json`` (molecules whose SCF failed, with the reason:
the run goes on without them) and ``README.md``, the dataset card. A rerun skips the molecules whose npz (or failure
record) exists, so a killed run loses at most the molecules in flight (one per worker).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict
from pathlib import Path

import numpy as np

from sciml.core.io.atomic import atomic_write_text
from sciml.core.io.checksum import sha256_file
from sciml.hamiltonian.data.cheap import check_cheap
from sciml.hamiltonian.data.generate import MoleculeJob, SCFSettings, check_settings, compute_molecule_npz, run_pool
from sciml.hamiltonian.data.qm9 import QM9Molecule
from sciml.hamiltonian.scf.h0 import import_pyscf

__all__ = ["CARD", "FAILED", "MANIFEST", "check_basis", "generate_qm9_shard", "molecule_file", "shard_folder",
           "verify_manifest"]

MANIFEST = "manifest.json"
FAILED = "failed.json"
CARD = "README.md"
MANIFEST_VERSION = 2


def shard_folder(out: str | Path, i: int, k: int) -> Path:
    """``out`` itself for one shard, else ``out/shard-00003-of-00010`` (so k array tasks can share ``out``)."""
    return Path(out) if k == 1 else Path(out) / f"shard-{i:05d}-of-{k:05d}"


def molecule_file(index: int) -> str:
    """File name of QM9 molecule ``index`` inside its shard."""
    return f"qm9_{index:06d}.npz"


def _failure_file(index: int) -> str:
    return f"qm9_{index:06d}.failed.json"


def check_basis(numbers, basis: str) -> None:
    """One-line ValueError when pyscf has no ``basis`` for one of the elements ``numbers``."""
    import warnings

    from pyscf import gto
    from pyscf.data.elements import ELEMENTS

    for z in sorted({int(z) for z in numbers}):
        symbol = ELEMENTS[z] if 0 < z < len(ELEMENTS) else str(z)
        try:
            with warnings.catch_warnings():  # pyscf suggests basis-set-exchange before it raises
                warnings.simplefilter("ignore")
                gto.basis.load(basis, symbol)
        except Exception:  # pyscf raises BasisNotFoundError or KeyError
            raise ValueError(f"element {symbol} (Z={z}) has no {basis} basis in pyscf; the engine cannot compute it "
                             "(choose another --basis or leave the molecule out)") from None


def _compute(mol: QM9Molecule, settings: SCFSettings, folder: str, guess=None) -> dict:
    """One molecule's SCF -> npz, or a failure record (top-level, so worker processes can pickle it).

    An SCF that does not converge (or any other error of this molecule) is written to ``qm9_<index>.failed.json``
    and returned as ``{"index", "failed": reason}``; the run goes on.
    """
    job = MoleculeJob("qm9", mol.index, mol.numbers, mol.positions)
    try:
        return {"index": mol.index, **compute_molecule_npz(Path(folder) / molecule_file(mol.index), job, settings,
                                                           guess, compact=True)}
    except Exception as err:  # one bad molecule must not end a shard of thousands
        record = {"index": mol.index, "smiles": mol.smiles, "formula": mol.formula, "n_atoms": len(mol.numbers),
                  "reason": f"{type(err).__name__}: {err}"}
        atomic_write_text(Path(folder) / _failure_file(mol.index), json.dumps(record) + "\n")
        return {"index": mol.index, "failed": record["reason"]}


def generate_qm9_shard(molecules: list[QM9Molecule], settings: SCFSettings, folder: str | Path, workers: int = 1,
                       progress: bool = True, selection: dict | None = None, guess=None,
                       retry_failed: bool = False) -> dict:
    """Compute the molecules of one shard that have no npz (or failure record) yet; write manifest, failures, card.

    Parameters
    ----------
    molecules : list of QM9Molecule
        The shard's molecules (:func:`sciml.hamiltonian.data.qm9.qm9_molecules`).
    settings : SCFSettings
        Level of theory; ``threads`` per process (1 by default). Cheap settings must pass
        :func:`sciml.hamiltonian.data.cheap.check_cheap`.
    folder : str or Path
        The shard folder (created; reused to resume).
    workers : int
        Processes running SCFs in parallel.
    progress : bool
        Show a progress bar.
    selection : dict, optional
        How the molecules were chosen (seed, n, shard, ...), recorded in the manifest.
    guess : callable, optional
        ``guess(numbers, positions, zeroth)`` -> starting density or None (e.g.
        :class:`sciml.hamiltonian.seed.ModelGuess`; ``zeroth``: the molecule's H0 and S, built once for both).
    retry_failed : bool
        Compute again the molecules a previous run recorded as failed.

    Returns
    -------
    dict
        ``computed``, ``skipped`` and ``failed`` (molecules), ``folder``, ``manifest`` (path), ``failed_file``.

    """
    import_pyscf()
    folder = Path(folder)
    cheap = check_cheap(settings)
    check_basis({z for m in molecules for z in m.numbers}, settings.basis)
    folder.mkdir(parents=True, exist_ok=True)
    check_settings(folder, "qm9", settings)
    if retry_failed:
        for m in molecules:
            (folder / _failure_file(m.index)).unlink(missing_ok=True)
    todo = [m for m in molecules
            if not (folder / molecule_file(m.index)).is_file() and not (folder / _failure_file(m.index)).is_file()]
    done = run_pool(_compute, todo, (settings, str(folder), guess), workers, progress, desc="QM9 SCF")
    level = {k: v for k, v in asdict(settings).items() if k not in ("threads", "device")}
    if cheap is not None:
        level["measured_error"] = asdict(cheap)
    entries, failed = [], []
    for m in molecules:
        npz, bad = folder / molecule_file(m.index), folder / _failure_file(m.index)
        if npz.is_file():
            entries.append({"index": m.index, "smiles": m.smiles, "formula": m.formula, "n_atoms": len(m.numbers),
                            "file": npz.name, "sha256": sha256_file(npz), **_scf_record(npz)})
        elif bad.is_file():
            failed.append(json.loads(bad.read_text()))
    data_hash = hashlib.sha256("".join(f"{e['sha256']}  {e['file']}\n" for e in entries).encode()).hexdigest()
    manifest = {"format_version": MANIFEST_VERSION, "source": "QM9 (qm9pack, MIT)", "settings": level,
                "selection": selection or {}, "n_molecules": len(entries), "n_failed": len(failed),
                "data_sha256": data_hash, "molecules": entries}
    atomic_write_text(folder / FAILED, json.dumps({"n_failed": len(failed), "molecules": failed}, indent=1) + "\n")
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    atomic_write_text(folder / CARD, dataset_card(manifest, failed))
    return {"computed": sum("failed" not in d for d in done), "failed": len(failed),
            "skipped": len(molecules) - len(todo), "folder": str(folder), "manifest": str(folder / MANIFEST),
            "failed_file": str(folder / FAILED)}


def _scf_record(path: Path) -> dict:
    """SCF seconds, cycles and starting density stored in one npz (fields absent from older files are left out)."""
    with np.load(path, allow_pickle=False) as data:
        out = {"scf_seconds": float(data["scf_seconds"][0])} if "scf_seconds" in data else {}
        if "scf_cycles" in data:
            out["scf_cycles"] = int(data["scf_cycles"][0])
        if "scf_guess" in data:
            out["scf_guess"] = str(data["scf_guess"][0])
    return out


def _ranges(indices: list[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``"1-3,7"`` (the spelling ``--indices`` reads)."""
    out, run = [], []
    for i in sorted(indices):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [i]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def dataset_card(manifest: dict, failed: list[dict]) -> str:
    """The shard's dataset card (markdown): source, method, settings, selection, molecules, counts, checksums."""
    st, sel, mols = manifest["settings"], manifest["selection"], manifest["molecules"]
    cheap = st.get("measured_error")
    flags = " (density fitting)" if st.get("density_fit") else ""
    atoms = [m["n_atoms"] for m in mols]
    elements = sorted({e for m in mols for e in re.findall(r"[A-Z][a-z]?", m["formula"])})
    cycles = [m["scf_cycles"] for m in mols if "scf_cycles" in m]
    seeded = sum(m.get("scf_guess") == "model" for m in mols)
    lines = [
        "# QM9 Kohn–Sham Hamiltonians (one shard)", "",
        "- **Source**: QM9 (Ramakrishnan et al., Sci. Data 1, 140022, 2014) at its own geometries (B3LYP/"
        "6-31G(2df,p), Å), read from the CSVs of the package qm9pack (MIT licence).",
        f"- **Method**: restricted Kohn–Sham {st['xc'].upper()} / {st['basis']} (pyscf), conv_tol {st['conv_tol']:g}, "
        f"XC grid level {st['grid_level']}{flags}; H0 = Fock matrix of the minao guess density "
        f"({st.get('h0', 'full')}, grid level 3); S the AO overlap.",
        "- **Settings**: " + ("the reference settings (exact Coulomb/exchange, grid level 3)" if cheap is None else
                              f"cheap, measured against the reference: H MAE ≤ {cheap['h_mae_uha']:.2f} µHa, "
                              f"max-abs ≤ {cheap['h_max_abs_uha']:.0f} µHa, occupied orbital energies ≤ "
                              f"{cheap['occupied_max_uha']:.0f} µHa (benchmarks/hamiltonian_cheap_settings.py)")
        + ("; final reference-settings Fock build" if st.get("final_build") and cheap is not None else "") + ".",
        "- **Selection**: " + ", ".join(f"{k} {v}" for k, v in sel.items() if v is not None) + ".",
        f"- **Molecules**: {len(mols)} computed ({', '.join(elements)}; {min(atoms, default=0)}–"
        f"{max(atoms, default=0)} atoms), {len(failed)} failed (failed.json, with the reason).",
        f"- **QM9 indices**: {_ranges([m['index'] for m in mols]) or 'none'}.",
    ]
    if cycles:
        lines.append(f"- **SCF**: {np.mean(cycles):.1f} cycles on average; {seeded} of {len(cycles)} started from "
                     "a model's prediction, the others from the minao guess.")
    lines += [
        "- **Files**: `qm9_<index>.npz` (zlib-compressed npz, float64: H, H0, S in pyscf AO order, Hartree; "
        "positions Å; energy, SCF seconds and cycles), `manifest.json` (sha256 per file), `failed.json`, "
        "`qm9.settings.json`.",
        f"- **Checksum**: data_sha256 `{manifest['data_sha256']}` (sha256 of the lines `<sha256>  <file>` of the "
        "manifest, in order); check with `sciml.hamiltonian.data.gen_qm9.verify_manifest(folder)`.",
        ""]
    return "\n".join(lines)


def verify_manifest(folder: str | Path) -> list[str]:
    """Files of a shard whose sha256 differs from ``manifest.json`` (missing files included); [] when intact."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; finish the shard with the same sciml data hamiltonian command")
    bad = []
    for entry in json.loads(path.read_text())["molecules"]:
        f = folder / entry["file"]
        if not f.is_file() or sha256_file(f) != entry["sha256"]:
            bad.append(entry["file"])
    return bad
