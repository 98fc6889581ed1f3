"""``sciml data release pack|unpack``: Hamiltonian data folders <-> a compact, checksummed release folder.

Examples
--------
``sciml data release pack runs/data/qm9/shard-00000-of-00010 --release datasets/qm9/release``
``sciml data release unpack datasets/qm9/release --out runs/data/qm9-release --workers 2``

``pack`` adds the npz files of QM9 shards (a running shard's finished molecules too) or of ``--molecule`` folders
that the release lacks, as one new chunk; ``unpack`` rebuilds H0 and S and writes the shared-format npz files,
skipping those already there (:mod:`sciml.hamiltonian.data.release`).

"""

from __future__ import annotations

import sys


def add_parser(sub, name: str) -> None:
    """Register ``data release`` with its ``pack`` and ``unpack`` verbs."""
    p = sub.add_parser(name, help="Hamiltonian data folders <-> a compact release folder (ΔH at 1 µHa, lzma)")
    verbs = p.add_subparsers(dest="release_verb", required=True)
    pk = verbs.add_parser("pack", help="add the folders' new npz files to a release as one chunk")
    pk.add_argument("folders", nargs="+", help="folders made by sciml data hamiltonian: QM9 shards (--source qm9) "
                    "or --molecule folders, one kind and level of theory per release")
    pk.add_argument("--release", required=True, help="release folder (created; e.g. datasets/qm9/release)")
    pk.set_defaults(run=run)
    up = verbs.add_parser("unpack", help="rebuild a release's files as npz files (H, H0, S)")
    up.add_argument("release", help="release folder (its manifest.json and chunks)")
    up.add_argument("--out", required=True, help="output folder of the npz files (reused to resume)")
    up.add_argument("--workers", type=int, default=1, help="processes rebuilding H0 in parallel")
    up.add_argument("--no-progress", action="store_true")
    up.set_defaults(run=run)


def run(args, overrides: list[str]) -> int:
    """Pack or unpack; print what was written."""
    from sciml.hamiltonian.data import release

    if args.release_verb == "pack":
        res = release.pack(args.folders, args.release)
        where = f"chunk {res['chunk']}" if res["chunk"] else "nothing new"
        print(f"release: {res['added']} files added ({where}); {res['n_files']} in {args.release}", file=sys.stderr)
        return 0
    if args.workers < 1:
        raise ValueError("--workers must be >= 1")
    res = release.unpack(args.release, args.out, args.workers, progress=not args.no_progress)
    print(f"release: {res['written']} files written, {res['skipped']} already there -> {res['folder']}",
          file=sys.stderr)
    return 0
