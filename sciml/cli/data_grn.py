"""``sciml data grn --output sim.h5ad [--config grn.yaml] [--seed S] [--grn.<key> value ...]``.

Simulates a perturbation screen on a random gene regulatory network (:mod:`sciml.perturbation.sim.simulate`) and
writes it as ``.h5ad`` (GEARS ``obs['condition']``, ``layers['counts']``, ground truth in ``uns['grn']``); prints the
share of doubles whose interaction exceeds the noise floor.
"""

from __future__ import annotations

import json
import time

from sciml.cli.feedback import stage


def add_parser(sub, name: str) -> None:
    """Register ``data grn``."""
    p = sub.add_parser(name, help="simulate a GRN perturbation screen with ground truth (h5ad)")
    p.add_argument("--output", required=True, help="output .h5ad file")
    p.add_argument("--config", default=None, help="YAML with a 'grn:' section, e.g. configs/data/grn_default.yaml")
    p.add_argument("--seed", type=int, default=None, help="random seed (overrides the config)")
    p.set_defaults(run=run, accepts_overrides=True)


def run(args, overrides: list[str]) -> int:
    """Simulate, write atomically, print a one-line JSON summary (and where it wrote, on stderr)."""
    from sciml.cli.config import apply_overrides, load_config
    from sciml.core.optional import require

    require("anndata")  # a core dependency; named here rather than as "No module named 'anndata'"
    from sciml.perturbation.data.anndata_io import write_h5ad
    from sciml.perturbation.sim.simulate import SimConfig, simulate

    cfg = load_config(args.config) if args.config else {}
    cfg = apply_overrides(cfg, overrides)
    unknown = set(cfg) - {"grn"}
    if unknown:
        raise ValueError(f"grn config: unknown sections {sorted(unknown)}; settings go under 'grn:' "
                         f"(override with --grn.<key> value)")
    section = dict(cfg.get("grn") or {})
    if args.seed is not None:
        section["seed"] = args.seed
    sim = SimConfig.from_dict(section)
    start = time.perf_counter()
    adata = simulate(sim)
    path = write_h5ad(adata, args.output)
    g = adata.uns["grn"]
    summary = {"output": str(path), "cells": adata.n_obs, "genes": adata.n_vars,
               "conditions": len(g["conditions"]), "doubles": len(g["doubles"]),
               "fraction_interacting": round(float(g["fraction_interacting"]), 3),
               "seconds": round(time.perf_counter() - start, 2)}
    print(json.dumps(summary))
    stage("data grn", f"wrote {path} ({adata.n_obs} cells x {adata.n_vars} genes) in {summary['seconds']} s")
    return 0
