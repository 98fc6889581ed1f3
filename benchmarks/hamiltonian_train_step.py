"""One training step of the Hamiltonian model: the convolution's read-out by e3nn's Linear or by ``split_linear``.

e3nn's ``Linear`` takes each input irrep with ``narrow``; in backward each narrow zero-fills a gradient of the whole
input, which for the convolution's (edges, 7104) tensor-product output of a QM9 batch is above glibc's 32 MB mmap
threshold, so every fill also maps fresh pages. :func:`sciml.hamiltonian.nn.layers.split_linear` evaluates the same
Linear (same weights) through one ``split``. Both variants train the same model (``--config``, default the organic
one) on the same first training batch of ``--data`` (one npz per molecule, e.g. the unpacked QM9 release), one
thread, alternating step by step after a warm-up step each; the loss of both is recorded to show they compute the
same thing. Writes ``benchmarks/results/hamiltonian_train_step.json``. Usage::

    sciml data release unpack datasets/qm9/release --out runs/data/qm9-release --workers 2
    python benchmarks/hamiltonian_train_step.py --data runs/data/qm9-release [--steps 3]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "hamiltonian_train_step.json"


def main(argv=None) -> int:
    """Alternate timed steps of the two read-outs; write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="runs/data/qm9-release", help="folder of molecule npz files")
    ap.add_argument("--config", default=str(ROOT / "configs" / "hamiltonian" / "organic.yaml"))
    ap.add_argument("--steps", type=int, default=3, help="timed steps of each variant")
    ap.add_argument("--output", default=str(RESULTS))
    args = ap.parse_args(argv)
    import torch
    import yaml

    from sciml.core.allocator import keep_freed_memory
    from sciml.hamiltonian.nn import layers
    from sciml.hamiltonian.task import build

    keep_freed_memory()  # as the sciml command line does
    torch.set_num_threads(1)
    cfg = yaml.safe_load(Path(args.config).read_text())
    cfg["data"]["path"] = args.data
    dm, module = build(cfg, Path("runs") / "bench-train-step")
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    module.log = lambda *a, **k: None  # no trainer attached
    opt = torch.optim.SGD(module.parameters(), lr=0.0)  # lr 0: every step sees the same weights
    ours = layers.split_linear
    variants = {"e3nn_linear": lambda linear, x: linear(x), "split_linear": ours}

    def step(name: str) -> tuple[float, float]:
        layers.split_linear = variants[name]
        start = time.perf_counter()
        opt.zero_grad()
        loss = module._step(batch, "train")
        loss.backward()
        opt.step()
        return time.perf_counter() - start, float(loss)

    times: dict[str, list[float]] = {n: [] for n in variants}
    losses = {}
    try:
        for name in variants:
            step(name)  # warm-up
        for k in range(args.steps):
            for name in (variants if k % 2 == 0 else reversed(list(variants))):
                seconds, losses[name] = step(name)
                times[name].append(seconds)
    finally:
        layers.split_linear = ours
    median = {n: float(np.median(t)) for n, t in times.items()}
    result = {"command": "python benchmarks/hamiltonian_train_step.py " + " ".join(argv or sys.argv[1:]),
              "data": args.data, "graphs": int(batch.num_graphs), "atoms": int(len(batch.z)),
              "edges": int(batch.edge_index.shape[1]), "threads": 1, "step_seconds": times,
              "median_seconds": median, "speedup": median["e3nn_linear"] / median["split_linear"],
              "loss": losses, "platform": platform.platform()}
    write_json(Path(args.output), result)
    print(f"{batch.num_graphs} molecules, {len(batch.z)} atoms, {result['edges']} edges: e3nn Linear "
          f"{median['e3nn_linear']:.2f} s, split_linear {median['split_linear']:.2f} s per step "
          f"({result['speedup']:.1f}x); wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
