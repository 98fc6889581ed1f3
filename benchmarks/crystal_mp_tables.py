"""Markdown tables of ``benchmarks/results/crystal_mp.json`` (what ``docs/benchmarks.md`` shows), one per target.

Usage::

    python benchmarks/crystal_mp_tables.py            # writes benchmarks/results/crystal_mp.md and prints it
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "crystal_mp.json"
UNITS = {"formation_energy_per_atom": "eV/atom", "band_gap": "eV"}


def _num(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def model_table(target: str, block: dict, anchors: dict) -> list[str]:
    """Rows of models (ours, baselines, then published anchors labelled as such)."""
    gap = target == "band_gap"
    columns = ["model", "MAE", *(["MAE non-metals", "metal ROC-AUC"] if gap else []), "structures/s"]
    head = "| " + " | ".join(columns) + " |"
    lines = [f"### {target} ({UNITS[target]}), test split n = {block['n_test']}", "", head,
             "|" + "---|" * (head.count("|") - 1)]
    for name, r in block["models"].items():
        extra = [_num(r.get("mae_nonmetal"), ".4f"), _num(r.get("roc_auc_metal"), ".3f")] if gap else []
        lines.append("| " + " | ".join([name, _num(r["mae"], ".4f"), *extra,
                                         _num(r.get("structures_per_s"), ".0f")]) + " |")
    for name, values in anchors.items():
        extra = ["-", "-"] if gap else []
        lines.append("| " + " | ".join([f"{name} (published, not our run)", str(values[target]), *extra, "-"]) + " |")
    return lines


def coverage_table(block: dict) -> list[str]:
    """Overall and per-group coverage of the shipped calibrator beside split conformal."""
    cov, split = block["coverage"], block["coverage"]["split_conformal"]
    classes = (f", metals {cov['metal']:.3f}, non-metals {cov['nonmetal']:.3f}" if "metal" in cov else "")
    split_classes = (f", metals {split['metal']:.3f}, non-metals {split['nonmetal']:.3f}" if "metal" in split else "")
    unbounded = f" ({100 * cov['unbounded']:.1f}% of the sets unbounded)" if cov.get("unbounded") else ""
    lines = ["", f"coverage ({cov['method']}): overall {cov['overall']:.3f}, mean width {cov['mean_width']:.3f}"
             f"{unbounded}{classes}; split conformal overall {split['overall']:.3f}{split_classes}", "",
             "| group | n | ours | split conformal |", "|---|---|---|---|"]
    for group, g in cov["groups"].items():
        label = group if g["judged"] else f"{group} (n < 200)"
        lines.append(f"| {label} | {g['n']} | {g['coverage']:.3f} | {split['groups'][group]['coverage']:.3f} |")
    judged = [g["coverage"] for g in cov["groups"].values() if g["judged"]]
    inside = sum(abs(c - 0.9) <= 0.03 for c in judged)
    lines += ["", f"{inside} of {len(judged)} groups of >= 200 test structures within ±0.03 of 0.90."]
    chances = [g["p_outside"] for g in cov["groups"].values() if g["judged"] and g.get("p_outside") is not None]
    if chances:
        lines[-1] += (f" A method calibrated exactly in every group would leave {sum(chances):.1f} of them outside on "
                      "one split (calibration and test sampling at these group sizes: "
                      "`sciml.uq.coverage_miss_probability`).")
    return lines


def domain_lines(block: dict) -> list[str]:
    """Share of the test split flagged and the verdicts on non-bulk inputs."""
    d = block["domain"]
    lines = ["", f"domain: test flagged {d['test_flagged']:.3f} (beta {d['beta']}, +3 sd "
             f"{d['binomial_tolerance']:.3f})"]
    lines += [f"- {name}: in_domain {r['in_domain']}" for name, r in d["non_bulk"].items()]
    return lines


def markdown(results: dict) -> str:
    """All targets' tables."""
    out = []
    for target in ("formation_energy_per_atom", "band_gap"):
        if target in results:
            block = results[target]
            out += [*model_table(target, block, results.get("anchors_not_our_runs", {})), *coverage_table(block),
                    *domain_lines(block), ""]
    return "\n".join(out)


def main() -> int:
    """Write ``crystal_mp.md`` beside the JSON and print it."""
    text = markdown(json.loads(RESULTS.read_text()))
    RESULTS.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
