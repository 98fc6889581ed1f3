"""One training step of the crystal network: graph-attention blocks on gathered atom projections vs on ``z_ij``.

:class:`sciml.crystal.nn.graph_attention.GraphAttentionBlock` computes every linear map of ``z_ij = [h_i, h_j, e_ij]``
as ``W_i h_i + W_j h_j + W_e e_ij``, with the atom parts projected once per atom and gathered (``forward``);
``forward_explicit`` builds ``z_ij`` per edge as the equations read. Both are timed on the same model (``--config``,
default the general formation-energy one) and the same first training batch, in rotating order step by step after a
warm-up step each, at each of ``--threads`` (default 1 and 2); process CPU time (``time.process_time``, summed over
threads) and wall time are both recorded, as this machine is shared. The loss of each variant is recorded to show
they compute the same thing. Writes ``benchmarks/results/crystal_train_step.json``. Usage::

    python benchmarks/crystal_train_step.py [--steps 5] [--threads 1 2]
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_json  # noqa: E402
from _timing import interleaved  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "crystal_train_step.json"


def main(argv=None) -> int:
    """Alternate timed steps of the two block implementations at each thread count; write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "crystal" / "mp-formation-energy.yaml"))
    ap.add_argument("--steps", type=int, default=5, help="timed steps of each variant")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch thread counts, each timed")
    ap.add_argument("--output", default=str(RESULTS))
    args = ap.parse_args(argv)
    import torch
    import yaml

    from sciml.crystal.task import build

    cfg = yaml.safe_load(Path(args.config).read_text())
    dm, module = build(cfg)
    batch = next(iter(dm.train_dataloader()))
    module.log = lambda *a, **k: None  # no trainer attached
    by_threads = {}
    for threads in args.threads:
        torch.set_num_threads(threads)
        by_threads[str(threads)] = time_variants(module, batch, args.steps)
        speedup = by_threads[str(threads)]["speedup_gathered_over_explicit"]
        print(f"{threads} thread(s): gathered over explicit {speedup['cpu']:.2f}x CPU, {speedup['wall']:.2f}x wall")
    result = {"command": "python benchmarks/crystal_train_step.py " + " ".join(argv or sys.argv[1:]),
              "config": args.config, "structures": int(batch.num_graphs), "atoms": int(len(batch.z)),
              "edges": int(batch.edge_index.shape[1]), "threads": by_threads, "platform": platform.platform()}
    write_json(Path(args.output), result)
    print(f"{batch.num_graphs} structures, {len(batch.z)} atoms, {result['edges']} edges; wrote {args.output}")
    return 0


def time_variants(module, batch, steps: int) -> dict:
    """Seconds per training step (wall and process CPU) of both block variants, in rotating order, and their loss."""
    import torch

    from sciml.crystal.nn.graph_attention import GraphAttentionBlock

    opt = torch.optim.SGD(module.parameters(), lr=0.0)  # lr 0: every step sees the same weights
    variants = {"gathered": GraphAttentionBlock.forward, "explicit": GraphAttentionBlock.forward_explicit}

    def step(name: str) -> float:
        GraphAttentionBlock.forward = variants[name]
        opt.zero_grad()
        loss = module.training_step(batch, 0)
        loss.backward()
        opt.step()
        return float(loss.detach())

    try:
        times, losses = interleaved(step, list(variants), steps)
    finally:
        GraphAttentionBlock.forward = variants["gathered"]
    median = {n: {k: float(np.median(v)) for k, v in t.items()} for n, t in times.items()}
    return {"step_seconds": times, "median_seconds": median, "loss": losses,
            "speedup_gathered_over_explicit": {k: median["explicit"][k] / median["gathered"][k]
                                               for k in ("wall", "cpu")}}


if __name__ == "__main__":
    raise SystemExit(main())
