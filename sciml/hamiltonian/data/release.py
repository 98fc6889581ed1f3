"""A compact, checksummed release of QM9 Hamiltonian shards, small enough to keep beside the code.

Of each molecule a release keeps only what its SCF made: ``ΔH = H − H0`` on the upper triangle, rounded to
:data:`QUANTUM` (1 µHa; every element within 0.5 µHa of the shard's float64 value) as int32, byte-shuffled and
lzma-compressed with the rest of its chunk: about 21 kB for a nine-heavy-atom molecule, where the shard's npz
(H, H0, S in float64) takes 600 kB. Everything else is rebuilt by :func:`unpack` in about a second per molecule:
the geometry from qm9pack (by QM9 index), S analytically and ``H0 = F[ρ_SAD]`` the way the shard built it
(:func:`sciml.hamiltonian.scf.h0.zeroth_step_matrices`). H0's diagonal is stored in float64, and unpack refuses a
rebuild that differs from it by more than :data:`H0_TOLERANCE` (another pyscf, another geometry) before it writes
``H = H0 + ΔH``.

Layout of a release folder: ``chunk-00000.npz``, ... (immutable once written; each :func:`pack` call adds one with
the molecules not yet released) and ``manifest.json``: level of theory (the shards'), quantum, pyscf version,
per chunk its file, sha256 and QM9 indices, and ``data_sha256`` over the chunks.
"""

from __future__ import annotations

import hashlib
import json
import lzma
from pathlib import Path

import numpy as np

from sciml.core.io.atomic import atomic_open, atomic_write_text
from sciml.core.io.checksum import sha256_file

__all__ = ["H0_TOLERANCE", "MANIFEST", "QUANTUM", "pack", "read_chunk", "released_indices", "unpack",
           "verify_release"]

#: Hartree per stored integer of ΔH
QUANTUM = 1e-6
#: largest |rebuilt − packed| on H0's diagonal (Hartree) that unpack accepts
H0_TOLERANCE = 1e-8
MANIFEST = "manifest.json"
FORMAT_VERSION = 1


def _quantise(delta: np.ndarray) -> bytes:
    """Upper triangle of ``delta`` (n, n) Hartree -> little-endian int32 bytes, byte-shuffled (high bytes together)."""
    q = np.rint(delta[np.triu_indices(len(delta))] / QUANTUM)
    if np.abs(q).max(initial=0) >= 2**31:
        raise ValueError(f"|H - H0| reaches {np.abs(delta).max():.1f} Ha, beyond an int32 of {QUANTUM:g} Ha")
    return q.astype("<i4").tobytes()


def _shuffle(raw: bytes) -> bytes:
    return np.frombuffer(raw, np.uint8).reshape(-1, 4).T.tobytes()


def _unshuffle(raw: bytes) -> np.ndarray:
    return np.frombuffer(np.frombuffer(raw, np.uint8).reshape(4, -1).T.tobytes(), "<i4")


def _symmetric(triangle: np.ndarray, n: int) -> np.ndarray:
    """(n (n+1) / 2,) upper triangle, row-major -> symmetric (n, n)."""
    out = np.zeros((n, n))
    out[np.triu_indices(n)] = triangle
    return out + np.triu(out, 1).T


def _load_manifest(release: Path) -> dict | None:
    path = release / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else None


def _shard_files(shard: Path, settings: dict | None) -> tuple[dict, dict[int, Path]]:
    """Level of theory and ``{QM9 index: npz}`` of one shard folder, finished or still running.

    A running shard's npz files are complete (written atomically). A folder made with other settings than the
    release is refused.
    """
    path = shard / "qm9.settings.json"  # written by sciml.hamiltonian.data.generate.check_settings at the start
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; is {shard} a folder made by sciml data hamiltonian "
                                "--source qm9?")
    level = json.loads(path.read_text())
    if settings is not None and level != settings:
        raise ValueError(f"{shard} was made with {level}, the release with {settings}; pack it into another "
                         "release folder")
    return level, {int(f.stem.removeprefix("qm9_")): f for f in sorted(shard.glob("qm9_*.npz"))}


def pack(shards: list[str | Path], release: str | Path) -> dict:
    """Add the molecules of finished ``shards`` that ``release`` lacks, as one new chunk.

    Returns ``{"added", "chunk" (path or None), "n_molecules" (in the release)}``.
    """
    import pyscf

    release = Path(release)
    manifest = _load_manifest(release) or {"format_version": FORMAT_VERSION, "source": "QM9 (qm9pack, MIT)",
                                           "settings": None, "quantum_hartree": QUANTUM,
                                           "pyscf": pyscf.__version__, "chunks": []}
    have = {i for c in manifest["chunks"] for i in c["indices"]}
    new = {}
    for shard in map(Path, shards):
        manifest["settings"], files = _shard_files(shard, manifest["settings"])
        new |= {i: f for i, f in files.items() if i not in have}
    have |= set(new)
    if not new:
        return {"added": 0, "chunk": None, "n_molecules": len(have)}
    chunk = release / f"chunk-{len(manifest['chunks']):05d}.npz"
    release.mkdir(parents=True, exist_ok=True)
    with atomic_open(chunk, "wb") as fh:
        np.savez(fh, **_chunk_arrays(new))
    manifest["chunks"].append({"file": chunk.name, "sha256": sha256_file(chunk), "indices": sorted(new)})
    _write_manifest(release, manifest)
    return {"added": len(new), "chunk": str(chunk), "n_molecules": len(have)}


def _chunk_arrays(files: dict[int, Path]) -> dict[str, np.ndarray]:
    """The arrays of one chunk: per molecule its index, size, energy and SCF record; H0's diagonals; ΔH's blob."""
    cols: dict[str, list] = {k: [] for k in ("index", "n_ao", "energy", "scf_seconds", "scf_cycles", "scf_guess")}
    blobs, diags = [], []
    for index in sorted(files):
        with np.load(files[index], allow_pickle=False) as data:
            h, h0 = data["hamiltonian"][0], data["hamiltonian_0"][0]
            cols["energy"].append(float(data["energy_hartree"][0]))
            cols["scf_seconds"].append(float(data["scf_seconds"][0]))
            cols["scf_cycles"].append(int(data["scf_cycles"][0]) if "scf_cycles" in data else -1)
            cols["scf_guess"].append(str(data["scf_guess"][0]) if "scf_guess" in data else "minao")
        blobs.append(_quantise(h - h0))
        diags.append(np.diag(h0))
        cols["index"].append(index)
        cols["n_ao"].append(len(h))
    return {**{k: np.asarray(v) for k, v in cols.items()}, "h0_diagonal": np.concatenate(diags),
            "delta_h": np.frombuffer(lzma.compress(_shuffle(b"".join(blobs)), preset=9), np.uint8)}


def _write_manifest(release: Path, manifest: dict) -> None:
    manifest["n_molecules"] = sum(len(c["indices"]) for c in manifest["chunks"])
    lines = "".join(f"{c['sha256']}  {c['file']}\n" for c in manifest["chunks"])
    manifest["data_sha256"] = hashlib.sha256(lines.encode()).hexdigest()
    atomic_write_text(release / MANIFEST, json.dumps(manifest, indent=1) + "\n")


def verify_release(release: str | Path) -> dict:
    """The release's manifest after checking every chunk's sha256; one-line ValueError naming a changed chunk."""
    release = Path(release)
    manifest = _load_manifest(release)
    if manifest is None:
        raise FileNotFoundError(f"{release / MANIFEST} does not exist; is {release} a QM9 release folder "
                                "(datasets/qm9/release)?")
    for c in manifest["chunks"]:
        path = release / c["file"]
        if not path.is_file() or sha256_file(path) != c["sha256"]:
            raise ValueError(f"{path}: missing or its sha256 differs from {MANIFEST}; restore it "
                             f"(git checkout -- {path}) or pack the shards again into a new folder")
    return manifest


def released_indices(release: str | Path, settings: dict) -> set[int]:
    """QM9 indices ``release`` holds, checked intact and made with ``settings`` (a ``qm9.settings.json`` record)."""
    manifest = verify_release(release)
    if manifest["settings"] != settings:
        raise ValueError(f"{release} was made with {manifest['settings']}, not {settings}; skip only a release "
                         "made with the same settings")
    return {i for c in manifest["chunks"] for i in c["indices"]}


def read_chunk(path: str | Path) -> list[dict]:
    """The molecules of one chunk: ``index``, ``delta_h`` (n_ao, n_ao) Hartree, ``h0_diagonal`` (n_ao,) and SCF meta."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    ints = _unshuffle(lzma.decompress(arrays.pop("delta_h").tobytes()))
    out, at, diag_at = [], 0, 0
    for j, n in enumerate(arrays["n_ao"].tolist()):
        size = n * (n + 1) // 2
        out.append({"index": int(arrays["index"][j]), "delta_h": _symmetric(ints[at:at + size] * QUANTUM, n),
                    "h0_diagonal": arrays["h0_diagonal"][diag_at:diag_at + n],
                    "energy": float(arrays["energy"][j]), "scf_seconds": float(arrays["scf_seconds"][j]),
                    "scf_cycles": int(arrays["scf_cycles"][j]), "scf_guess": str(arrays["scf_guess"][j])})
        at, diag_at = at + size, diag_at + n
    return out


def unpack(release: str | Path, out: str | Path, workers: int = 1, progress: bool = True) -> dict:
    """Rebuild the release's molecules as shared-format npz files in ``out`` (skips files already there).

    Returns ``{"written", "skipped", "folder"}``; the files are ``out/qm9_<index>.npz``, read like a shard's.
    """
    from sciml.hamiltonian.data.gen_qm9 import molecule_file
    from sciml.hamiltonian.data.generate import run_pool
    from sciml.hamiltonian.data.qm9 import qm9_molecules

    manifest, out = verify_release(release), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    todo, skipped = [], 0
    for c in manifest["chunks"]:
        if all((out / molecule_file(i)).is_file() for i in c["indices"]):
            skipped += len(c["indices"])
            continue
        packed = [m for m in read_chunk(Path(release) / c["file"]) if not (out / molecule_file(m["index"])).is_file()]
        skipped += len(c["indices"]) - len(packed)
        geometry = {m.index: m for m in qm9_molecules([p["index"] for p in packed])}
        todo += [(geometry[p["index"]], p) for p in packed]
    run_pool(_rebuild, todo, (manifest["settings"], str(out)), workers, progress, desc="QM9 unpack")
    return {"written": len(todo), "skipped": skipped, "folder": str(out)}


def _rebuild(item, settings: dict, out: str) -> None:
    """H0 and S of one molecule, H = H0 + ΔH, written atomically (top-level, so worker processes can pickle it)."""
    from sciml.hamiltonian.data.gen_qm9 import molecule_file
    from sciml.hamiltonian.data.generate import H0_GRID_LEVEL, MoleculeJob, pyscf_molecule, write_molecule_npz
    from sciml.hamiltonian.scf.h0 import zeroth_step_matrices

    mol_qm9, packed = item
    h0_method = settings.get("h0", "full")
    mol = pyscf_molecule(mol_qm9.numbers, mol_qm9.positions, settings["basis"])
    mats = zeroth_step_matrices(mol, settings["xc"], H0_GRID_LEVEL, h0_method)
    gap = np.abs(np.diag(mats["H0"]) - packed["h0_diagonal"]).max()
    if gap > H0_TOLERANCE:
        raise ValueError(f"QM9 index {mol_qm9.index}: rebuilt H0 differs from the packed one by {gap:.2e} Ha on its "
                         f"diagonal (more than {H0_TOLERANCE:g}); unpack with the pyscf version the release names, "
                         "or regenerate the shard with sciml data hamiltonian --source qm9")
    mats["H"] = mats["H0"] + packed["delta_h"]
    job = MoleculeJob("qm9", mol_qm9.index, mol_qm9.numbers, mol_qm9.positions)
    meta = {"energy": packed["energy"], "n_occupied": mol.nelectron // 2, "scf_seconds": packed["scf_seconds"],
            "basis": settings["basis"], "xc": settings["xc"], "index": mol_qm9.index, "name": "qm9",
            "h0": h0_method, "scf_cycles": packed["scf_cycles"], "guess": packed["scf_guess"]}
    write_molecule_npz(Path(out) / molecule_file(mol_qm9.index), job, {"mats": mats, "ao_labels": mol.ao_labels()},
                       meta, compact=True)
