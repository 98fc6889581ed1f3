"""``sciml data qm9-release pack|unpack``: QM9 Hamiltonian shards <-> a compact, checksummed release folder.

Examples
--------
``sciml data qm9-release pack runs/data/qm9/shard-00000-of-00010 --release datasets/qm9/release``
``sciml data qm9-release unpack datasets/qm9/release --out runs/data/qm9-release --workers 2``

``pack`` adds the shards' molecules the release lacks as one new chunk (a running shard's finished molecules
too); ``unpack`` rebuilds H0 and S and writes one shared-format npz per molecule, skipping those already there
(:mod:`sciml.hamiltonian.data.release`).

"""

from __future__ import annotations

import sys


def add_parser(sub, name: str) -> None:
    """Register ``data qm9-release`` with its ``pack`` and ``unpack`` verbs."""
    p = sub.add_parser(name, help="QM9 Hamiltonian shards <-> a compact release folder (ΔH at 1 µHa, lzma)")
    verbs = p.add_subparsers(dest="release_verb", required=True)
    pk = verbs.add_parser("pack", help="add the shards' new molecules to a release as one chunk")
    pk.add_argument("shards", nargs="+", help="shard folders made by sciml data hamiltonian --source qm9")
    pk.add_argument("--release", required=True, help="release folder (created; e.g. datasets/qm9/release)")
    pk.set_defaults(run=run)
    up = verbs.add_parser("unpack", help="rebuild a release's molecules as npz files (H, H0, S)")
    up.add_argument("release", help="release folder (its manifest.json and chunks)")
    up.add_argument("--out", required=True, help="output folder of qm9_<index>.npz files (reused to resume)")
    up.add_argument("--workers", type=int, default=1, help="processes rebuilding H0 in parallel")
    up.add_argument("--no-progress", action="store_true")
    up.set_defaults(run=run)


def run(args, overrides: list[str]) -> int:
    """Pack or unpack; print what was written."""
    from sciml.hamiltonian.data import release

    if args.release_verb == "pack":
        res = release.pack(args.shards, args.release)
        where = f"chunk {res['chunk']}" if res["chunk"] else "nothing new"
        print(f"qm9 release: {res['added']} molecules added ({where}); {res['n_molecules']} in {args.release}",
              file=sys.stderr)
        return 0
    if args.workers < 1:
        raise ValueError("--workers must be >= 1")
    res = release.unpack(args.release, args.out, args.workers, progress=not args.no_progress)
    print(f"qm9 release: {res['written']} molecules written, {res['skipped']} already there -> {res['folder']}",
          file=sys.stderr)
    return 0
