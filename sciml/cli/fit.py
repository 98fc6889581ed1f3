"""``sciml fit|validate|test --config CFG [--ckpt_path P] [--fresh] [--section.key value ...]``.

The config is checked against its schema (:mod:`sciml.core.config`, listed by ``sciml fit --help``) before
anything is imported or written. Under DDP every process runs this command (Lightning's launcher re-runs it,
or ``srun`` starts one per device); only global rank 0 prints the metrics.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_parser(sub, name: str) -> None:
    """Register the verb ``name`` (fit, validate or test); its help lists every config key with its default."""
    from sciml.core.config import describe

    p = sub.add_parser(name, help=f"{name} a model from a YAML config (Lightning)",
                       description=f"{name} a model from a YAML run config; any config key can be overridden "
                                   "with --section.key value.",
                       epilog=describe(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="YAML config, e.g. configs/crystal/perov5.yaml")
    p.add_argument("--ckpt_path", default=None,
                   help="checkpoint to resume/evaluate, or 'last' (fit resumes the newest of last.ckpt and "
                        "SLURM's hpc_ckpt_<n>.ckpt in the run folder by default, and says so)")
    if name == "fit":
        p.add_argument("--fresh", action="store_true",
                       help="start over: remove the run folder's previous checkpoints, logs, split and "
                            "calibrator (not in job scripts that requeue)")
    p.set_defaults(run=run, accepts_overrides=True, verb_name=name)


def run(args, overrides: list[str]) -> int:
    """Load and check the config, apply overrides, and fit/validate/test; 143 when stopped by SIGTERM."""
    from sciml.cli.config import load_run_config

    cfg = load_run_config(args.config, overrides)  # schema and data path checked before the heavy imports
    from lightning.pytorch.utilities.exceptions import SIGTERMException
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    try:
        if args.verb_name == "fit":
            from sciml.core.train import train

            metrics = train(cfg, ckpt_path=args.ckpt_path, fresh=args.fresh)
        else:
            from sciml.core.train import evaluate

            metrics = evaluate(cfg, args.ckpt_path, stage=args.verb_name)
    except SIGTERMException:  # Lightning stops at the next batch; a SystemExit that would exit 0
        print(f"error: {args.verb_name} stopped by SIGTERM; rerun the same command to resume from the last "
              "checkpoint", file=sys.stderr)
        return 143
    if rank_zero_only.rank == 0:
        print(json.dumps(metrics, indent=1))
    return 0
