"""Entry point of the ``sciml`` command.

Every verb exits non-zero with a one-line ``error:`` message on bad input; set ``SCIML_DEBUG=1`` to see
the full traceback instead.

Start-up is kept short: every ``sciml.cli`` module imports only argparse-level things at module level (its
``add_parser`` registers arguments; its ``run`` imports torch, Lightning, pymatgen, anndata... when called),
so ``sciml --help`` and a one-line input error return in well under a second
(``benchmarks/startup.py``, ``tests/integration/test_startup.py``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from sciml.core.allocator import keep_freed_memory

#: verb -> module with ``add_parser(sub, name)`` and the ``run`` it sets (imported when the parser is built)
VERBS: dict[str, str] = {"fit": "sciml.cli.fit", "validate": "sciml.cli.fit", "test": "sciml.cli.fit",
                         "export": "sciml.cli.export", "crystal": "sciml.cli.crystal", "data": "sciml.cli.data",
                         "calibrate": "sciml.cli.calibrate", "hamiltonian": "sciml.cli.hamiltonian",
                         "perturbation": "sciml.cli.perturbation"}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one sub-parser per verb."""
    parser = argparse.ArgumentParser(prog="sciml", description="Scientific ML with calibrated uncertainty.")
    sub = parser.add_subparsers(dest="verb", required=True)
    for name, module in VERBS.items():
        importlib.import_module(module).add_parser(sub, name)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``sciml`` command line; return the exit code."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "accepts_overrides", False):
        parser.error(f"unrecognised arguments: {' '.join(extra)}")
    keep_freed_memory()  # tensors freed and reallocated at every step stay in the heap (sciml.core.allocator)
    try:
        return int(args.run(args, extra) or 0)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # one line for the user, traceback on request
        if os.environ.get("SCIML_DEBUG"):
            raise
        message = str(err).splitlines()[0] if str(err) else err.__class__.__name__
        print(f"error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
