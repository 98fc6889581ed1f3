"""Sharded, resumable, checksummed QM9 Hamiltonian shards (``sciml data hamiltonian --source qm9``).

A shard is a folder: one npz per molecule (``qm9_000001.npz``, the shared one-conformer format written atomically
by :func:`sciml.hamiltonian.data.generate.compute_molecule_npz`, the same SCF as every molecule source), the
level of theory (``qm9.settings.json``: a rerun with other settings is refused), and ``manifest.json`` listing each
molecule's QM9 index, SMILES, formula, file and sha256 with the settings and the selection. A rerun skips the
molecules whose npz exists, so a killed run loses at most the molecules in flight (one per worker).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from sciml.core.io.atomic import atomic_write_text
from sciml.core.io.checksum import sha256_file
from sciml.hamiltonian.data.generate import MoleculeJob, SCFSettings, check_settings, compute_molecule_npz, run_pool
from sciml.hamiltonian.data.qm9 import QM9Molecule
from sciml.hamiltonian.scf.h0 import import_pyscf

__all__ = ["MANIFEST", "check_basis", "generate_qm9_shard", "molecule_file", "shard_folder", "verify_manifest"]

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1


def shard_folder(out: str | Path, i: int, k: int) -> Path:
    """``out`` itself for one shard, else ``out/shard-00003-of-00010`` (so k array tasks can share ``out``)."""
    return Path(out) if k == 1 else Path(out) / f"shard-{i:05d}-of-{k:05d}"


def molecule_file(index: int) -> str:
    """File name of QM9 molecule ``index`` inside its shard."""
    return f"qm9_{index:06d}.npz"


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


def _compute(mol: QM9Molecule, settings: SCFSettings, folder: str) -> dict:
    """One molecule's SCF -> npz (top-level, so worker processes can pickle it)."""
    job = MoleculeJob("qm9", mol.index, mol.numbers, mol.positions)
    return compute_molecule_npz(Path(folder) / molecule_file(mol.index), job, settings)


def generate_qm9_shard(molecules: list[QM9Molecule], settings: SCFSettings, folder: str | Path, workers: int = 1,
                       progress: bool = True, selection: dict | None = None) -> dict:
    """Compute the molecules of one shard that have no npz yet, then write ``manifest.json``.

    Parameters
    ----------
    molecules : list of QM9Molecule
        The shard's molecules (:func:`sciml.hamiltonian.data.qm9.qm9_molecules`).
    settings : SCFSettings
        Level of theory; ``threads`` per process (1 by default).
    folder : str or Path
        The shard folder (created; reused to resume).
    workers : int
        Processes running SCFs in parallel.
    progress : bool
        Show a progress bar.
    selection : dict, optional
        How the molecules were chosen (seed, n, shard, ...), recorded in the manifest.

    Returns
    -------
    dict
        ``computed`` and ``skipped`` (molecules), ``folder``, ``manifest`` (path).

    """
    import_pyscf()
    folder = Path(folder)
    check_basis({z for m in molecules for z in m.numbers}, settings.basis)
    folder.mkdir(parents=True, exist_ok=True)
    check_settings(folder, "qm9", settings)
    todo = [m for m in molecules if not (folder / molecule_file(m.index)).is_file()]
    run_pool(_compute, todo, (settings, str(folder)), workers, progress, desc="QM9 SCF")
    level = {k: v for k, v in asdict(settings).items() if k not in ("threads", "device")}
    entries = [{"index": m.index, "smiles": m.smiles, "formula": m.formula, "n_atoms": len(m.numbers),
                "file": molecule_file(m.index), "sha256": sha256_file(folder / molecule_file(m.index))}
               for m in molecules]
    manifest = {"format_version": MANIFEST_VERSION, "source": "QM9 (qm9pack, MIT)", "settings": level,
                "selection": selection or {}, "n_molecules": len(entries), "molecules": entries}
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return {"computed": len(todo), "skipped": len(molecules) - len(todo), "folder": str(folder),
            "manifest": str(folder / MANIFEST)}


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
