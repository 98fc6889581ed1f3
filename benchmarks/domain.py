"""Applicability domain and conditional coverage of the shipped models → ``benchmarks/results/domain.json``.

One section per family (``--family``; a section is written only once complete and replaces only its own key of
the results file, :func:`_results.merge_results`, so families are measured separately). Sections written here:

``crystal``
    For each shipped crystal model (``checkpoints/perov5-heat-all``, ``checkpoints/carbon24-energy``):
    the in-distribution set is the model's own test split, rebuilt from its recorded data and split seed;
    shifted sets are the 70 JARVIS POSCARs of ``alignn_sample``, strained and substituted structures generated
    from the test split, and the other model's test structures (carbon vs perovskites). Reported: flag rates
    (with what flagged them: the conformal p-value alone, unseen elements, cell size outside the training
    range), AUROC of the domain score (the k-NN distance) for "from the shifted set" and for "true value outside
    the interval", coverage of in-domain rows beside the unflagged baseline (every row), coverage by cell-size
    group for the Mondrian calibrator and the unweighted single-threshold baseline (the same scores, one split
    quantile), a re-split estimate of the group coverages (calib ∪ test split at random, 200 times), and
    shift-aware (weighted) against plain coverage on covariate-shifted subsamples of the test split.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/domain.py --family crystal [--output benchmarks/results/domain.json]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _results import merge_results  # noqa: E402
from domain_crystal import crystal_section  # noqa: E402
from domain_perturbation import perturbation_section  # noqa: E402

# family -> function(args) -> dict. The Hamiltonian section is written by benchmarks/domain_hamiltonian.py (its own
# command, same read-modify-write of the results file); families may register theirs here instead.
SECTIONS = {"crystal": crystal_section, "perturbation": perturbation_section}


def main(argv: list[str] | None = None) -> int:
    """Compute the requested sections and merge them into the results file."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", choices=sorted(SECTIONS), action="append", help="section(s) to (re)compute")
    p.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "domain.json"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.output)
    for family in args.family or sorted(SECTIONS):
        start = time.perf_counter()
        section = SECTIONS[family](args) | {"threads": args.threads, "seconds": round(time.perf_counter() - start, 1)}
        merge_results(out, {family: section})  # this family's complete section; the others stay as they were
        print(f"wrote section {family!r} of {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
