"""Entry point of the ``sciml`` command.

Every verb exits non-zero with a one-line ``error:`` message on bad input; set ``SCIML_DEBUG=1`` to see
the full traceback instead. Exit codes (:data:`sciml.cli.feedback.EXIT_CODES`, ``docs/cli.md``): 0 everything
done, 1 some inputs failed (rows or files say why, the others were predicted), 2 an error stopped the command
(bad arguments, a missing or unreadable input or model), 3 no input could be predicted, 130 interrupted.
Torch threads of the verbs that run a model follow one rule, :func:`sciml.core.threads.choose_threads`.

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

from sciml.cli.feedback import EXIT_CODES, EXIT_ERROR, EXIT_INTERRUPTED
from sciml.core.allocator import keep_freed_memory

#: verb -> module with ``add_parser(sub, name)`` and the ``run`` it sets (imported when the parser is built)
VERBS: dict[str, str] = {"fit": "sciml.cli.fit", "validate": "sciml.cli.fit", "test": "sciml.cli.fit",
                         "export": "sciml.cli.export", "models": "sciml.cli.models", "crystal": "sciml.cli.crystal",
                         "hamiltonian": "sciml.cli.hamiltonian", "perturbation": "sciml.cli.perturbation",
                         "calibrate": "sciml.cli.calibrate", "data": "sciml.cli.data"}

#: verbs whose ``--threads`` follows sciml.core.threads.choose_threads (``data`` keeps its own per-process count)
THREADED = ("crystal", "hamiltonian", "perturbation", "export", "calibrate")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one sub-parser per verb."""
    epilog = "exit codes:\n" + "\n".join(f"  {code:<4}{text}" for code, text in EXIT_CODES.items())
    parser = argparse.ArgumentParser(prog="sciml", description="Scientific ML with calibrated uncertainty.",
                                     epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="verb", required=True)
    for name, module in VERBS.items():
        importlib.import_module(module).add_parser(sub, name)
    return parser


def _apply_threads(args) -> None:
    """Replace ``args.threads`` by the rule's number (:func:`sciml.core.threads.choose_threads`), checked."""
    if args.verb in THREADED and hasattr(args, "threads"):
        from sciml.core.threads import choose_threads

        args.threads, args.threads_source = choose_threads(args.threads)


def main(argv: list[str] | None = None) -> int:
    """Run the ``sciml`` command line; return the exit code (:data:`EXIT_CODES`)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "accepts_overrides", False):
        parser.error(f"unrecognised arguments: {' '.join(extra)}")
    keep_freed_memory()  # tensors freed and reallocated at every step stay in the heap (sciml.core.allocator)
    try:
        _apply_threads(args)
        return int(args.run(args, extra) or 0)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as err:  # one line for the user, traceback on request
        if os.environ.get("SCIML_DEBUG"):
            raise
        message = str(err).splitlines()[0] if str(err) else err.__class__.__name__
        print(f"error: {message}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
