"""``sciml export --ckpt RUN/checkpoints/best.ckpt --calibrate [--alpha 0.1] --output DIR [--overwrite] [--threads N]``.

An existing artifact folder is never replaced silently: ``--overwrite`` says so (the replacement is atomic).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from sciml.cli.feedback import stage


def add_parser(sub, name: str) -> None:
    """Register ``export``."""
    p = sub.add_parser(name, help="export a checkpoint to a calibrated artifact folder")
    p.add_argument("--ckpt", required=True, help="Lightning checkpoint (best.ckpt of a run)")
    p.add_argument("--output", required=True, help="artifact folder to write (must not exist, unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output folder (atomically)")
    p.add_argument("--calibrate", action="store_true", help="fit split conformal on the calib split")
    p.add_argument("--alpha", type=float, default=0.1, help="miscoverage of the stored default interval")
    p.add_argument("--config", default=None, help="run config (default: config.yaml of the run folder)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: OMP_NUM_THREADS, else "
                   "the cores not busy; sciml.core.threads)")
    p.set_defaults(run=run)


def check_output(output: str | Path, overwrite: bool) -> None:
    """Refuse to replace an existing ``output`` unless ``overwrite`` (one-line error naming folder and flag)."""
    output = Path(output)
    if output.exists() and not overwrite:
        kind = "folder" if output.is_dir() else "file"
        raise FileExistsError(f"{output} already exists ({kind}); pass --overwrite to replace it, or choose "
                              "another --output")


def run(args, overrides: list[str]) -> int:
    """Export and print the measured metrics, with a stage line per step and where the artifact went.

    The arguments, the checkpoint and the ``--config`` file are checked before anything is loaded.
    """
    from sciml.cli.config import check_alpha_arg

    check_alpha_arg(args.alpha)
    check_output(args.output, args.overwrite)
    ckpt = Path(args.ckpt)
    if not ckpt.is_file():
        raise FileNotFoundError(f"{ckpt}: no such checkpoint file")
    if args.config is not None and not Path(args.config).is_file():
        raise FileNotFoundError(f"{args.config}: no such config file (--config)")
    start = time.perf_counter()
    stage("export", f"loading {ckpt} ...", terminal_only=True)
    import torch

    from sciml.cli.config import load_config
    from sciml.core.export import load_run
    from sciml.core.registry import family

    torch.set_num_threads(args.threads)
    state, cfg = load_run(ckpt, load_config(args.config) if args.config else None)
    steps = "measuring the test split" + (" and fitting the conformal calibrator on the calib split"
                                          if args.calibrate else "")
    stage("export", f"loaded {ckpt} ({cfg.get('task')} model, epoch {state.get('epoch', '?')}) in "
          f"{time.perf_counter() - start:.1f} s; {steps} (rebuilds the data module: minutes for large datasets)")
    metrics = family(cfg, "export").export(ckpt, state, args.output, cfg, args.calibrate, args.alpha, None)
    print(json.dumps(metrics, indent=1))
    stage("export", f"wrote {args.output} in {time.perf_counter() - start:.1f} s")
    return 0
