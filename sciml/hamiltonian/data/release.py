"""A compact, checksummed release of Hamiltonian data folders, small enough to keep beside the code.

Of each conformer a release keeps only what its SCF made: ``ΔH = H − H0`` on the upper triangle, rounded to
:data:`QUANTUM` (1 µHa; every element within 0.5 µHa of the folder's float64 value) as int32, byte-shuffled and
lzma-compressed with the rest of its chunk: about 20 kB for a nine-heavy-atom molecule, where the npz (H, H0, S in
float64) takes 600 kB. Everything else is rebuilt by :func:`unpack` in 1–3 s per conformer: S analytically
and ``H0 = F[ρ_SAD]`` the way the folder built it (:func:`sciml.hamiltonian.scf.h0.zeroth_step_matrices`), at the
geometry of a QM9 molecule read from qm9pack by its index (kind ``qm9``: QM9 shards, no QM9 file copied) or stored
in the chunk (kind ``molecules``: folders of ``sciml data hamiltonian --molecule``). H0's diagonal is stored in
float64, and unpack refuses a rebuild that differs from it by more than :data:`H0_TOLERANCE` (another pyscf,
another geometry) before it writes ``H = H0 + ΔH``.

A release folder holds ``chunk-00000.npz``, ... (immutable once written; each :func:`pack` call adds one with the
files not yet released) and ``manifest.json``: kind, level of theory (the folders'), quantum, pyscf version, per
chunk its file, sha256 and the npz files it holds, and ``data_sha256`` over the chunks.
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
_QM9_SETTINGS = "qm9.settings.json"  # written by sciml.hamiltonian.data.generate.check_settings
_PER_CONFORMER = ("n_ao", "energy", "scf_seconds", "scf_cycles", "scf_guess")


def _quantise(delta: np.ndarray) -> bytes:
    """Upper triangle of ``delta`` (n, n) Hartree -> little-endian int32 bytes."""
    q = np.rint(delta[np.triu_indices(len(delta))] / QUANTUM)
    if np.abs(q).max(initial=0) >= 2**31:
        raise ValueError(f"|H - H0| reaches {np.abs(delta).max():.1f} Ha, beyond an int32 of {QUANTUM:g} Ha")
    return q.astype("<i4").tobytes()


def _shuffle(raw: bytes) -> bytes:
    """int32 bytes -> the first bytes of every number, then the second, ... (compresses far better)."""
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


def _folder_files(folder: Path) -> tuple[str, dict, dict[str, Path]]:
    """Kind, level of theory and ``{file name: path}`` of a generator's folder, finished or still running.

    A QM9 shard's npz files are complete as soon as they exist (written atomically); a ``--molecule`` folder's
    merged ``<name>.npz`` files are written when its run ends.
    """
    if (folder / _QM9_SETTINGS).is_file():
        return ("qm9", json.loads((folder / _QM9_SETTINGS).read_text()),
                {f.name: f for f in sorted(folder.glob("qm9_*.npz"))})
    levels = {r.read_text() for r in folder.glob("*.settings.json")}
    if len(levels) != 1:
        raise ValueError(f"{folder} holds {len(levels)} levels of theory (*.settings.json); pack a folder made by "
                         "sciml data hamiltonian, one level of theory per folder")
    return "molecules", json.loads(levels.pop()), {f.name: f for f in sorted(folder.glob("*.npz"))}


def pack(folders: list[str | Path], release: str | Path) -> dict:
    """Add the npz files of ``folders`` (QM9 shards, or ``--molecule`` folders) that ``release`` lacks, as one chunk.

    A file is identified by its name: one already released is not packed again (a molecule extended with more
    conformers later goes into a new release). Returns ``{"added" (files), "chunk" (path or None), "n_files" (in
    the release)}``.
    """
    import pyscf

    release = Path(release)
    manifest = _load_manifest(release) or {"format_version": FORMAT_VERSION, "kind": None, "settings": None,
                                           "quantum_hartree": QUANTUM, "pyscf": pyscf.__version__, "chunks": []}
    have = {f for c in manifest["chunks"] for f in c["files"]}
    new: dict[str, Path] = {}
    for folder in map(Path, folders):
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder} is not a folder; give folders made by sciml data hamiltonian")
        kind, level, files = _folder_files(folder)
        for key, value in (("kind", kind), ("settings", level)):
            if manifest[key] is not None and manifest[key] != value:
                raise ValueError(f"{folder} holds {key} {value}, the release {manifest[key]}; pack it into another "
                                 "release folder")
            manifest[key] = value
        for name, path in files.items():
            if name in new:
                raise ValueError(f"{path} and {new[name]} share a file name; pack them into separate releases")
            if name not in have:
                new[name] = path
    if not new:
        return {"added": 0, "chunk": None, "n_files": len(have)}
    chunk = release / f"chunk-{len(manifest['chunks']):05d}.npz"
    release.mkdir(parents=True, exist_ok=True)
    with atomic_open(chunk, "wb") as fh:
        np.savez(fh, **_chunk_arrays(new, geometry=manifest["kind"] == "molecules"))
    manifest["chunks"].append({"file": chunk.name, "sha256": sha256_file(chunk), "files": sorted(new)})
    _write_manifest(release, manifest)
    return {"added": len(new), "chunk": str(chunk), "n_files": len(have) + len(new)}


def _chunk_arrays(files: dict[str, Path], geometry: bool) -> dict[str, np.ndarray]:
    """The arrays of one chunk.

    Per file its name and conformer count (and its atoms and positions, with ``geometry``); per conformer its AO
    count and SCF record; H0's diagonals; the ΔH blob.
    """
    cols: dict[str, list] = {k: [] for k in ("file", "n_conf", "n_atoms", "numbers", "positions",
                                             "h0_diagonal", *_PER_CONFORMER)}
    blobs = []
    for name in sorted(files):
        with np.load(files[name], allow_pickle=False) as data:
            h, h0 = data["hamiltonian"], data["hamiltonian_0"]
            n_conf = len(h)
            cols["file"].append(name)
            cols["n_conf"].append(n_conf)
            cols["n_atoms"].append(len(data["atomic_numbers"]))
            cols["numbers"].append(data["atomic_numbers"])
            cols["positions"].append(data["positions_angstrom"].reshape(-1, 3))
            cols["energy"].append(data["energy_hartree"])
            cols["scf_seconds"].append(data["scf_seconds"])
            cols["scf_cycles"].append(data["scf_cycles"] if "scf_cycles" in data else np.full(n_conf, -1))
            cols["scf_guess"].append(data["scf_guess"] if "scf_guess" in data else np.full(n_conf, "minao"))
        for c in range(n_conf):
            blobs.append(_quantise(h[c] - h0[c]))
            cols["h0_diagonal"].append(np.diag(h0[c]))
            cols["n_ao"].append([len(h0[c])])
    out = {"files": np.asarray(cols["file"]), "n_conf": np.asarray(cols["n_conf"]),
           **{k: np.concatenate(cols[k]) for k in ("h0_diagonal", *_PER_CONFORMER)},
           "delta_h": np.frombuffer(lzma.compress(_shuffle(b"".join(blobs)), preset=9), np.uint8)}
    if geometry:
        out |= {"n_atoms": np.asarray(cols["n_atoms"]), "numbers": np.concatenate(cols["numbers"]),
                "positions": np.concatenate(cols["positions"])}
    return out


def _write_manifest(release: Path, manifest: dict) -> None:
    manifest["n_files"] = sum(len(c["files"]) for c in manifest["chunks"])
    lines = "".join(f"{c['sha256']}  {c['file']}\n" for c in manifest["chunks"])
    manifest["data_sha256"] = hashlib.sha256(lines.encode()).hexdigest()
    atomic_write_text(release / MANIFEST, json.dumps(manifest, indent=1) + "\n")


def verify_release(release: str | Path) -> dict:
    """The release's manifest after checking every chunk's sha256; one-line ValueError naming a changed chunk."""
    release = Path(release)
    manifest = _load_manifest(release)
    if manifest is None:
        raise FileNotFoundError(f"{release / MANIFEST} does not exist; is {release} a release folder (e.g. "
                                "datasets/qm9/release)?")
    for c in manifest["chunks"]:
        path = release / c["file"]
        if not path.is_file() or sha256_file(path) != c["sha256"]:
            raise ValueError(f"{path}: missing or its sha256 differs from {MANIFEST}; restore it "
                             f"(git checkout -- {path}) or pack the folders again into a new release")
    return manifest


def _qm9_index(name: str) -> int:
    return int(Path(name).stem.removeprefix("qm9_"))


def released_indices(release: str | Path, settings: dict) -> set[int]:
    """QM9 indices ``release`` holds, checked intact and made with ``settings`` (a ``qm9.settings.json`` record)."""
    manifest = verify_release(release)
    if manifest["kind"] != "qm9" or manifest["settings"] != settings:
        raise ValueError(f"{release} holds {manifest['kind']} data made with {manifest['settings']}, not QM9 with "
                         f"{settings}; skip only a QM9 release made with the same settings")
    return {_qm9_index(f) for c in manifest["chunks"] for f in c["files"]}


def read_chunk(path: str | Path) -> list[dict]:
    """The files of one chunk, in order.

    Each: ``file``; per conformer (lists) ``delta_h`` (n_ao, n_ao) Hartree, ``h0_diagonal`` (n_ao,), ``energy``,
    ``scf_seconds``, ``scf_cycles``, ``scf_guess``; and ``numbers`` (n_atoms,), ``positions`` (n_conf, n_atoms, 3) Å
    where the chunk stores geometry.
    """
    with np.load(path, allow_pickle=False) as data:
        a = {k: data[k] for k in data.files}
    ints = _unshuffle(lzma.decompress(a.pop("delta_h").tobytes()))
    out, conf, at, diag_at, atom_at, row = [], 0, 0, 0, 0, 0
    for j, name in enumerate(a["files"].tolist()):
        n_conf = int(a["n_conf"][j])
        entry = {"file": name, "delta_h": [], "h0_diagonal": []}
        for c in range(conf, conf + n_conf):
            n = int(a["n_ao"][c])
            size = n * (n + 1) // 2
            entry["delta_h"].append(_symmetric(ints[at:at + size] * QUANTUM, n))
            entry["h0_diagonal"].append(a["h0_diagonal"][diag_at:diag_at + n])
            at, diag_at = at + size, diag_at + n
        for key in ("energy", "scf_seconds", "scf_cycles", "scf_guess"):
            entry[key] = a[key][conf:conf + n_conf].tolist()
        if "numbers" in a:
            n_atoms = int(a["n_atoms"][j])
            entry["numbers"] = a["numbers"][atom_at:atom_at + n_atoms]
            entry["positions"] = a["positions"][row:row + n_conf * n_atoms].reshape(n_conf, n_atoms, 3)
            atom_at, row = atom_at + n_atoms, row + n_conf * n_atoms
        conf += n_conf
        out.append(entry)
    return out


def unpack(release: str | Path, out: str | Path, workers: int = 1, progress: bool = True) -> dict:
    """Rebuild the release's files as shared-format npz files in ``out`` (skips files already there).

    Returns ``{"written", "skipped", "folder"}``, counts of files (molecules).
    """
    from sciml.hamiltonian.data.generate import run_pool

    manifest, out = verify_release(release), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    todo, skipped = [], 0
    for c in manifest["chunks"]:
        missing = [f for f in c["files"] if not (out / f).is_file()]
        skipped += len(c["files"]) - len(missing)
        if missing:
            todo += _with_geometry([e for e in read_chunk(Path(release) / c["file"]) if e["file"] in missing])
    run_pool(_rebuild, todo, (manifest["settings"], str(out)), workers, progress, desc="unpack")
    return {"written": len(todo), "skipped": skipped, "folder": str(out)}


def _with_geometry(entries: list[dict]) -> list[dict]:
    """Entries with ``numbers`` and ``positions``: QM9 files get theirs from qm9pack by index."""
    qm9_entries = [e for e in entries if "numbers" not in e]
    if qm9_entries:
        from sciml.hamiltonian.data.qm9 import qm9_molecules

        for e, m in zip(qm9_entries, qm9_molecules([_qm9_index(e["file"]) for e in qm9_entries]), strict=True):
            e["numbers"], e["positions"] = np.asarray(m.numbers), np.asarray(m.positions)[None]
    return entries


def _rebuild(entry: dict, settings: dict, out: str) -> None:
    """S, H0 and H = H0 + ΔH of one file's conformers, written atomically (top-level: worker processes pickle it)."""
    from sciml.hamiltonian.data.generate import H0_GRID_LEVEL, pyscf_molecule
    from sciml.hamiltonian.data.npz import write_arrays
    from sciml.hamiltonian.scf.h0 import zeroth_step_matrices

    h0_method = settings.get("h0", "full")
    mats: dict[str, list] = {"H": [], "H0": [], "S": []}
    for pos, delta, diag in zip(entry["positions"], entry["delta_h"], entry["h0_diagonal"], strict=True):
        mol = pyscf_molecule(entry["numbers"], pos, settings["basis"])
        built = zeroth_step_matrices(mol, settings["xc"], H0_GRID_LEVEL, h0_method)
        gap = np.abs(np.diag(built["H0"]) - diag).max()
        if gap > H0_TOLERANCE:
            raise ValueError(f"{entry['file']}: rebuilt H0 differs from the packed one by {gap:.2e} Ha on its "
                             f"diagonal (more than {H0_TOLERANCE:g}); unpack with the pyscf version the release "
                             "names, or regenerate the data with sciml data hamiltonian")
        for key, value in (("H", built["H0"] + delta), ("H0", built["H0"]), ("S", built["S"])):
            mats[key].append(value)
    meta = {"energy": entry["energy"], "scf_seconds": entry["scf_seconds"], "n_occupied": mol.nelectron // 2,
            "basis": settings["basis"], "xc": settings["xc"], "h0": h0_method, "scf_cycles": entry["scf_cycles"],
            "guess": entry["scf_guess"]}
    write_arrays(Path(out) / entry["file"], entry["numbers"], entry["positions"],
                 {k: np.stack(v) for k, v in mats.items()}, mol.ao_labels(), meta, compress=True)
