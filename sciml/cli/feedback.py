"""What the verbs tell the user: early input checks, stage lines, progress bars, α notes, exit codes.

Everything here is cheap to import (no torch): verbs call :func:`require_inputs` before their heavy imports,
so a typo in a file name fails in a fraction of a second.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

EXIT_OK, EXIT_SOME_FAILED, EXIT_ERROR, EXIT_NONE_PREDICTED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
#: exit code of every ``sciml`` verb -> meaning (printed by ``sciml --help``; docs/cli.md)
EXIT_CODES = {EXIT_OK: "done: every input predicted (or the verb's work finished)",
              EXIT_SOME_FAILED: "some inputs failed: their rows or files say why, the other inputs were predicted",
              EXIT_ERROR: "an error stopped the command before or during its work (one 'error:' line): bad "
                          "arguments, a missing or unreadable input, model or config",
              EXIT_NONE_PREDICTED: "no input could be predicted (every input failed, or none was found)",
              EXIT_INTERRUPTED: "interrupted (Ctrl-C)"}


def predict_exit_code(n_inputs: int, n_failed: int) -> int:
    """Exit code of a predict verb: 0 all predicted, 1 some failed, 3 none predicted (or no input found)."""
    if n_inputs == 0 or n_failed >= n_inputs:
        return EXIT_NONE_PREDICTED
    return EXIT_SOME_FAILED if n_failed else EXIT_OK


def require_inputs(paths: Iterable, what: str, hint: str = "") -> None:
    """Raise ``FileNotFoundError`` naming every path of ``paths`` that does not exist.

    Parameters
    ----------
    paths : iterable of str or Path
        Command-line inputs (files or folders).
    what : str
        What they should be, e.g. ``"file or folder"``.
    hint : str
        What to give instead, appended after ``;``.

    """
    missing = [str(p) for p in paths if not Path(p).exists()]
    if missing:
        shown = ", ".join(missing[:5]) + (f" (and {len(missing) - 5} more)" if len(missing) > 5 else "")
        raise FileNotFoundError(f"{shown}: no such {what}" + (f"; {hint}" if hint else ""))


def stage(verb: str, message: str, terminal_only: bool = False) -> None:
    """Print ``verb: message`` to stderr at once (stage lines show even when progress bars are off).

    With ``terminal_only`` the line is printed only when stderr is a terminal: used for "loading ..." lines
    printed *before* a step that may fail on user input, so that logs and tests see a failure as the single
    ``error:`` line while a person at a terminal is not left waiting in silence.
    """
    if terminal_only and not sys.stderr.isatty():
        return
    print(f"{verb}: {message}", file=sys.stderr, flush=True)


def progress(iterable: Iterable | None = None, **kwargs):
    """A tqdm bar on stderr, drawn only when stderr is a terminal (logs get the stage lines instead)."""
    from tqdm.auto import tqdm

    return tqdm(iterable, file=sys.stderr, disable=None, **kwargs)


def smallest_finite_alpha(n: int) -> float:
    """Smallest α, rounded up to two significant digits, whose conformal quantile over ``n`` scores is finite.

    The rank ``k = ⌈(n+1)(1−α)⌉`` is at most ``n`` exactly when ``α ≥ 1/(n+1)``; the value returned is
    ``1/(n+1)`` rounded up (``n = 6``: 0.15; ``n = 99``: 0.01; ``n = 7``: 0.13) and checked with
    :func:`sciml.uq.quantile.conformal_rank`. ``n = 0`` gives ``nan`` (no α works).
    """
    from sciml.uq.quantile import conformal_rank

    if n < 1:
        return math.nan
    exact = 1 / (n + 1)
    step = 10.0 ** (math.floor(math.log10(exact)) - 1)
    alpha = float(f"{math.ceil(round(exact / step, 9)) * step:.12g}")
    while conformal_rank(n, alpha) > n:  # rounding noise only; at most a step or two
        alpha = float(f"{alpha + step:.12g}")
    return alpha


def infinite_interval_note(sizes: Sequence[int], alpha: float, items: str = "calibration structures") -> str:
    """One line explaining infinite intervals at ``alpha``, or ``""`` when every calibration set is big enough.

    Parameters
    ----------
    sizes : sequence of int
        Number of calibration scores of each calibration set (one for split conformal, one per group for
        Mondrian or multigroup calibrators).
    alpha : float
        Requested miscoverage.
    items : str
        What a calibration score is, for the message.

    """
    from sciml.uq.quantile import conformal_rank

    short = [n for n in sizes if conformal_rank(int(n), alpha) > n]
    if not short:
        return ""
    worst = min(int(n) for n in sizes)
    fix = smallest_finite_alpha(worst)
    need = conformal_rank(worst, alpha)
    if len(sizes) == 1:
        where = f"the interval needs the {need}-th smallest of {worst} {items}, so it is infinite"
    else:
        where = (f"{len(short)} of {len(sizes)} calibration groups are too small (smallest: {worst} {items}) "
                 "and give infinite intervals")
    tail = (f"the smallest α with finite intervals is {fix:g} (--alpha {fix:g})" if worst > 0
            else "a group without calibration data stays infinite at any α")
    return f"note: at α={alpha:g} {where}; {tail}"


def calibration_sizes(calibrator) -> list[int]:
    """Calibration scores per calibration set.

    ``[n]`` (split, conditional), one per group (Mondrian, multigroup), ``[zeros, positives]`` (hurdle, also per group).
    """
    if calibrator.method in ("hurdle", "conditional_hurdle"):
        return [int((calibrator.y <= 0).sum()), int((calibrator.y > 0).sum())]
    if hasattr(calibrator, "counts"):  # MondrianConformal
        return [int(c) for c in calibrator.counts.tolist()]
    if calibrator.method == "multigroup":  # a group without enough points has an infinite threshold
        return [int(c) for c in calibrator.members.sum(0).tolist()]
    return [int(calibrator.scores.numel())]


def add_domain_arguments(parser, items: str, scope: str = "", shift_aware: bool = True) -> None:
    """Add ``--beta`` (and ``--shift-aware``, ``--min-ess``) to a predict sub-parser.

    ``items`` names what is predicted (``"structure"``, ``"molecule"``); ``scope`` prefixes the help of options
    that apply to some inputs only (``"molecules: "``).
    """
    parser.add_argument("--beta", type=float, default=None,
                        help=f"{scope}domain flag level: a {items} with domain p-value <= beta is out of domain "
                             f"(default: the model's, 0.05; an exchangeable {items} is flagged with probability "
                             "<= beta)")
    if shift_aware:
        parser.add_argument("--shift-aware", action="store_true",
                            help=f"{scope}weighted conformal intervals against all inputs together (covariate "
                                 "shift), with an effective-sample-size guard: infinite intervals rather than false "
                                 "confidence")
        parser.add_argument("--min-ess", type=float, default=50.0, help="ESS floor of --shift-aware (default 50)")
