"""Entry point of the ``sciml`` command.

Every verb exits non-zero with a one-line ``error:`` message on bad input; set ``SCIML_DEBUG=1`` to see
the full traceback instead.
"""

from __future__ import annotations

import argparse
import os
import sys

from sciml.cli import calibrate, crystal, data, export, fit, hamiltonian, perturbation

VERBS = {"fit": fit, "validate": fit, "test": fit, "export": export, "crystal": crystal, "data": data,
         "calibrate": calibrate, "hamiltonian": hamiltonian, "perturbation": perturbation}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one sub-parser per verb."""
    parser = argparse.ArgumentParser(prog="sciml", description="Scientific ML with calibrated uncertainty.")
    sub = parser.add_subparsers(dest="verb", required=True)
    for name, module in VERBS.items():
        module.add_parser(sub, name)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``sciml`` command line; return the exit code."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "accepts_overrides", False):
        parser.error(f"unrecognised arguments: {' '.join(extra)}")
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
