"""``sciml export --ckpt RUN/checkpoints/best.ckpt --calibrate [--alpha 0.1] --output checkpoints/NAME``."""

from __future__ import annotations

import json


def add_parser(sub, name: str) -> None:
    """Register ``export``."""
    p = sub.add_parser(name, help="export a checkpoint to a calibrated artifact folder")
    p.add_argument("--ckpt", required=True, help="Lightning checkpoint (best.ckpt of a run)")
    p.add_argument("--output", required=True, help="artifact folder to write (replaced atomically)")
    p.add_argument("--calibrate", action="store_true", help="fit split conformal on the calib split")
    p.add_argument("--alpha", type=float, default=0.1, help="miscoverage of the stored default interval")
    p.add_argument("--config", default=None, help="run config (default: config.yaml of the run folder)")
    p.set_defaults(run=run)


def run(args, overrides: list[str]) -> int:
    """Export and print the measured metrics."""
    from sciml.cli.config import load_config
    from sciml.core.export import export

    cfg = load_config(args.config) if args.config else None
    metrics = export(args.ckpt, args.output, calibrate=args.calibrate, alpha=args.alpha, config=cfg)
    print(json.dumps(metrics, indent=1))
    print(f"wrote {args.output}")
    return 0
