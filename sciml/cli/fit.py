"""``sciml fit|validate|test --config CFG [--ckpt_path P] [--section.key value ...]``."""

from __future__ import annotations

import json


def add_parser(sub, name: str) -> None:
    """Register the verb ``name`` (fit, validate or test)."""
    p = sub.add_parser(name, help=f"{name} a model from a YAML config (Lightning)")
    p.add_argument("--config", required=True, help="YAML config, e.g. configs/crystal/perov5.yaml")
    p.add_argument("--ckpt_path", default=None,
                   help="checkpoint to resume/evaluate, or 'last' (fit resumes last.ckpt of the run by default)")
    p.set_defaults(run=run, accepts_overrides=True, verb_name=name)


def run(args, overrides: list[str]) -> int:
    """Load the config, apply overrides, and fit/validate/test."""
    from sciml.cli.config import apply_overrides, load_config

    cfg = apply_overrides(load_config(args.config), overrides)
    if args.verb_name == "fit":
        from sciml.train import train

        metrics = train(cfg, ckpt_path=args.ckpt_path)
    else:
        from sciml.train import evaluate

        metrics = evaluate(cfg, args.ckpt_path, stage=args.verb_name)
    print(json.dumps(metrics, indent=1))
    return 0
