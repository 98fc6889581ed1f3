"""``sciml data <kind> ...``: dataset generators and downloaders.

Each kind lives in its own module (``sciml.cli.data_<kind>``) with ``add_parser(sub, name)`` registering its
sub-verb and ``run(args, overrides)``; this module only collects them.
"""

from __future__ import annotations

import importlib

#: sub-verb -> module implementing it
KINDS: dict[str, str] = {"grn": "sciml.cli.data_grn", "hamiltonian": "sciml.cli.data_hamiltonian",
                         "release": "sciml.cli.data_release"}


def add_parser(sub, name: str) -> None:
    """Register ``data`` with one sub-verb per entry of :data:`KINDS`."""
    p = sub.add_parser(name, help="generate or fetch datasets")
    kinds = p.add_subparsers(dest="data_kind", required=True)
    for kind, module in KINDS.items():
        importlib.import_module(module).add_parser(kinds, kind)
