"""One training step of the Hamiltonian model: e3nn's product and Linear, ``split_linear``, the fused convolution.

e3nn's ``Linear`` takes each input irrep with ``narrow`` and its ``TensorProduct`` narrows its inputs and per-edge
weights once per path; in backward each narrow zero-fills a gradient of the whole tensor, which for the convolution's
(edges, 7104) tensor-product output of a QM9 batch is above glibc's 32 MB mmap threshold, so every fill also maps
fresh pages. Four variants of the same model (same weights):

- ``e3nn``: e3nn's ``TensorProduct`` then e3nn's ``Linear`` everywhere;
- ``split_linear``: every Linear through one ``split`` (:func:`sciml.hamiltonian.nn.layers.split_linear`), the
  tensor product still e3nn's;
- ``fused``: as shipped, the convolution through :func:`sciml.hamiltonian.nn.layers.tensor_product_linear` (inputs
  and weights split once, each path's output straight into the Linear);
- ``stored_ridge``: as ``fused``, on the same molecules carrying the ridge base model's ΔH
  (:func:`sciml.hamiltonian.model.attach_base`, what training does once before its first step), so the step makes no
  ridge call.

All train the same model (``--config``, default the organic one) on the same molecules, the first ``batch_size`` of
the train split of ``--data`` (one npz per molecule, e.g. the unpacked QM9 release), one thread, in rotating order
step by step after a warm-up step each; the loss of each is recorded to show they compute the same thing. Writes
``benchmarks/results/hamiltonian_train_step.json``. Usage::

    sciml data release unpack datasets/qm9/release --out runs/data/qm9-release --workers 2
    python benchmarks/hamiltonian_train_step.py --data runs/data/qm9-release [--steps 3]
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
    from sciml.hamiltonian.model import attach_base
    from sciml.hamiltonian.nn import layers
    from sciml.hamiltonian.task import build

    keep_freed_memory()  # as the sciml command line does
    torch.set_num_threads(1)
    cfg = yaml.safe_load(Path(args.config).read_text())
    cfg["data"]["path"] = args.data
    dm, module = build(cfg, Path("runs") / "bench-train-step")
    dm.setup("fit")
    samples = dm.datasets["train"][:dm.batch_size]
    batch = dm.collate_fn(samples)
    stored = [dict(sample) for sample in samples]
    attach_base(stored, module, dm.collate_fn)  # what training does once, before its first step
    batches = {"stored_ridge": dm.collate_fn(stored)}
    module.log = lambda *a, **k: None  # no trainer attached
    opt = torch.optim.SGD(module.parameters(), lr=0.0)  # lr 0: every step sees the same weights
    split, fused = layers.split_linear, layers.tensor_product_linear
    variants = {"e3nn": (lambda tp, linear, x1, x2, w: linear(tp(x1, x2, w)), lambda linear, x: linear(x)),
                "split_linear": (lambda tp, linear, x1, x2, w: split(linear, tp(x1, x2, w)), split),
                "fused": (fused, split), "stored_ridge": (fused, split)}

    def step(name: str) -> float:
        layers.tensor_product_linear, layers.split_linear = variants[name]
        opt.zero_grad()
        loss = module._step(batches.get(name, batch), "train")
        loss.backward()
        opt.step()
        return float(loss)

    names = list(variants)
    try:
        timed, losses = interleaved(step, names, args.steps)
    finally:
        layers.tensor_product_linear, layers.split_linear = fused, split
    times = {n: t["wall"] for n, t in timed.items()}
    median = {n: float(np.median(t)) for n, t in times.items()}
    result = {"command": "python benchmarks/hamiltonian_train_step.py " + " ".join(argv or sys.argv[1:]),
              "data": args.data, "graphs": int(batch.num_graphs), "atoms": int(len(batch.z)),
              "edges": int(batch.edge_index.shape[1]), "threads": 1, "step_seconds": times,
              "median_seconds": median,
              "speedup_vs_e3nn": {n: median["e3nn"] / median[n] for n in names[1:]},
              "stored_ridge_speedup_vs_fused": median["fused"] / median["stored_ridge"],
              "loss": losses, "platform": platform.platform()}
    write_json(Path(args.output), result)
    print(f"{batch.num_graphs} molecules, {len(batch.z)} atoms, {result['edges']} edges: "
          + ", ".join(f"{n} {median[n]:.2f} s" for n in names) + " per step; speed-up over e3nn "
          + ", ".join(f"{n} {v:.2f}x" for n, v in result["speedup_vs_e3nn"].items()) + f"; wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
