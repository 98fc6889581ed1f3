"""Start-up time of the ``sciml`` command: what a user waits for before any real work.

Each case runs in a fresh child process (``subprocess``, wall time from the parent); the median of ``--repeats``
runs is reported with the minimum and maximum. Cases:

- ``help``: ``sciml --help`` (target: under 1 s);
- ``missing_file``: ``sciml crystal predict --model checkpoints/perov5-heat-all nosuch.cif --output x.csv``
  (target: a one-line error in under 2 s);
- ``one_file``: a one-file crystal prediction with the shipped model (imports, model load, one structure);
- ``import_crystal``: ``python -c "import sciml.crystal"`` (the package; names load on first use);
- ``import_crystal_predict``: ``python -c "from sciml.crystal import predict"`` (what the Python API pays).

Torch threads are fixed (``--threads``, also ``OMP_NUM_THREADS``) and stated in the result, with the load average
of the machine before and after (other work on shared cores slows every case). With ``--before DIR`` the same
cases also run against another checkout (e.g. ``git worktree add /tmp/before <commit>``) through ``PYTHONPATH``,
interleaved run by run with this one so that both see the same load.

Usage::

    python benchmarks/startup.py [--repeats 5] [--threads 1] [--before /tmp/before]

Writes ``benchmarks/results/startup.json``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS_S = {"help": 1.0, "missing_file": 2.0}


def sciml_command() -> list[str]:
    """The ``sciml`` console script next to this interpreter (``python -m sciml.cli.main`` without one)."""
    script = Path(sys.executable).parent / "sciml"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "sciml.cli.main"]


def cases(tmp: Path, threads: int) -> dict[str, list[str]]:
    """Command line of every case; relative paths resolve in the checkout being measured."""
    sciml = sciml_command()
    model = "checkpoints/perov5-heat-all"
    return {"help": [*sciml, "--help"],
            "missing_file": [*sciml, "crystal", "predict", "--model", model, "nosuch.cif",
                             "--output", str(tmp / "x.csv")],
            "one_file": [*sciml, "crystal", "predict", "--model", model, "examples/structures/SrTiO3.cif",
                         "--output", str(tmp / "one.csv"), "--threads", str(threads)],
            "import_crystal": [sys.executable, "-c", "import sciml.crystal"],
            "import_crystal_predict": [sys.executable, "-c", "from sciml.crystal import predict"]}


def run_once(cmd: list[str], root: Path, threads: int) -> tuple[float, int, str]:
    """Wall seconds, exit code and last stderr line of ``cmd`` run in ``root`` with its ``sciml`` on the path."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONPATH=str(root))
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    lines = proc.stderr.strip().splitlines()
    return seconds, proc.returncode, lines[-1][:200] if lines else ""


def commit(root: Path) -> str:
    """Short commit of ``root``, marked ``+changes`` when its working tree differs."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True).stdout.strip()

    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return git("rev-parse", "--short", "HEAD") + ("+changes" if dirty else "")


def summarise(times: list[float], codes: list[int], last: str, target: float | None) -> dict:
    """Median, range and raw runs of one case (and whether the median meets its target, if it has one)."""
    median = statistics.median(times)
    out = {"median_s": round(median, 3), "min_s": round(min(times), 3), "max_s": round(max(times), 3),
           "runs_s": [round(t, 3) for t in times], "exit_codes": sorted(set(codes)), "last_stderr_line": last}
    if target is not None:
        out |= {"target_s": target, "meets_target": median < target}
    return out


def main(argv: list[str] | None = None) -> dict:
    """Measure every case (and the ``--before`` checkout's), write the JSON, print a table; return the result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--before", type=Path, default=None, help="another checkout to measure the same way")
    parser.add_argument("--cases", nargs="*", default=None, help="subset of cases (default: all)")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "startup.json")
    args = parser.parse_args(argv)
    roots = {"after": ROOT} | ({"before": args.before.resolve()} if args.before else {})
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:  # the name stays valid below for the displayed commands
        todo = cases(Path(tmp), args.threads)
        todo = {k: v for k, v in todo.items() if args.cases is None or k in args.cases}
        raw = {label: {case: ([], [], "") for case in todo} for label in roots}
        for _ in range(args.repeats):
            for case, cmd in todo.items():
                for label, root in roots.items():  # interleaved: both checkouts see the same load
                    seconds, code, last = run_once(cmd, root, args.threads)
                    times, codes, _ = raw[label][case]
                    raw[label][case] = (times + [seconds], codes + [code], last)
    result = {"what": "wall time of fresh processes (subprocess, measured by the parent), median of repeats",
              "repeats": args.repeats, "threads": args.threads,
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "torch": metadata.version("torch"),
                          "load_average_1min_start_end": [round(load_start[0], 2), round(os.getloadavg()[0], 2)]},
              "commands": {case: " ".join(Path(c).name if i == 0 else c.replace(tmp, "$TMP")
                                          for i, c in enumerate(cmd)) for case, cmd in todo.items()}}
    for label, root in roots.items():
        result[label] = {"checkout": commit(root)} | {
            case: summarise(*raw[label][case], TARGETS_S.get(case)) for case in todo}
    if "before" in result:
        result["speedup_median"] = {case: round(result["before"][case]["median_s"] / result["after"][case]["median_s"],
                                                1) for case in todo}
    from _results import write_json  # benchmarks/_results.py: complete runs only, atomic
    write_json(args.output, result)
    for case in todo:
        row = f"{case:24} {result['after'][case]['median_s']:8.2f} s"
        if "before" in result:
            row += f"   (before {result['before'][case]['median_s']:.2f} s)"
        print(row)
    print(f"wrote {args.output}", file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
