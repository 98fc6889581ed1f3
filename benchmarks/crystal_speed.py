"""Crystal prediction speed beside CHGNet on the same Materials Project structures, and the one-file command's time.

Throughput (one process, 1 torch thread, ``torch.no_grad()``): ``--n`` structures drawn with a fixed seed from a CSV
with a ``cif`` column (default: the mp36k training pool), parsed once with pymatgen (parse time reported, counted in
neither model). For our model (``--model``, default: the shipped default crystal model):

- ``graph``: :func:`sciml.crystal.data.graphs.structure_to_graph` per structure (neighbour list and reflections);
- ``model``: the forward pass (``predict_step``) in batches of ``--batch-size``, collation included;
- ``graph_and_model``: the two together (seconds added);
- ``predict_api``: :func:`sciml.crystal.predict` on the parsed structures (graphs, forward pass, domain p-value and
  conformal interval of every row).

For CHGNet (``pip install 'sciml[bench]'``; weights ship in its wheel): ``graph`` is its ``graph_converter`` and
``model`` its forward pass with ``task="e"`` (energy only: no forces, stress or magnetic moments), in the same
batches. The model passes are repeated ``--repeats`` times and the median is reported. Both models see the same
structures: those whose graph our model builds (and, if it refuses elements it never saw in training, those it
accepts); the count is in the result, beside how many have only training elements.

One-file command (``--command-repeats``, 0 to skip): ``sciml crystal predict --model M <one CIF> --output ...``
timed as a whole fresh process, interleaved run by run with ``python -c "import torch"`` so that the ratio between
the two is read under the same load (:mod:`startup`).

Usage::

    nice python benchmarks/crystal_speed.py [--model NAME] [--n 1000] [--repeats 3] [--command-repeats 7]
    nice python benchmarks/crystal_speed.py --skip-throughput --before /tmp/before   # the command, before/after

Writes ``benchmarks/results/crystal_speed.json`` (cases merged: ``throughput:<model>``, ``one_file_command``).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported (here or in a child process)
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import platform
import statistics
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from _results import results_file

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "crystal_speed.json"
POOL = ROOT.parent / "shared" / "data" / "materials" / "mp36k" / "mp36k_train_pool.csv.gz"
ONE_FILE = "examples/structures/SrTiO3.cif"


def read_structures(path: Path, n: int, seed: int) -> tuple[list, list[str], float]:
    """``n`` structures drawn with ``seed`` from the CSV ``path`` (``cif`` column), their ids and the parse seconds."""
    import pandas as pd

    from sciml.core.structures import parse_cif_string

    table = pd.read_csv(path)
    rows = table.sample(n=min(n, len(table)), random_state=seed)
    ids = [str(x) for x in rows.get("material_id", rows.index)]
    start = time.perf_counter()
    structures = [parse_cif_string(text, source) for text, source in zip(rows["cif"], ids, strict=True)]
    return structures, ids, time.perf_counter() - start


def batches(items: list, size: int):
    """Consecutive slices of ``items`` of length ``size`` (the last may be shorter)."""
    return (items[i:i + size] for i in range(0, len(items), size))


def timed_passes(run, repeats: int) -> dict:
    """Call ``run()`` ``repeats`` times; median, min and max seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times)}


def rates(n: int, atoms: int, seconds: float) -> dict:
    """Seconds, structures per second and atoms per second (rounded for the JSON)."""
    return {"seconds": round(seconds, 3), "structures_per_s": round(n / seconds, 1),
            "atoms_per_s": round(atoms / seconds, 0)}


def accepted_graphs(structures: list, ids: list[str], predictor) -> tuple[list[int], list, int]:
    """Indices and graphs our model accepts, and how many graphs failed to build.

    A structure is accepted when its graph builds; when the forward pass refuses elements never seen in training
    (tried on one such structure), structures with unseen elements are left out too.
    """
    import torch
    from torch_geometric.data import Batch

    from sciml.core.structures import StructureError
    from sciml.crystal.data.graphs import structure_to_graph

    keep, graphs, failed = [], [], 0
    for k, (structure, source) in enumerate(zip(structures, ids, strict=True)):
        try:
            graphs.append(structure_to_graph(structure, predictor.graph, source))
            keep.append(k)
        except StructureError:
            failed += 1
    unseen = [i for i, k in enumerate(keep) if not known_elements(structures[k], predictor)]
    if unseen:
        try:
            with torch.no_grad():
                predictor.module.predict_step(Batch.from_data_list([graphs[unseen[0]]]))
        except Exception as err:  # the model refuses unseen elements: time it on the ones it accepts
            print(f"{predictor.path.name} refuses unseen elements ({type(err).__name__}); timing the "
                  f"{len(keep) - len(unseen)} structures with training elements only", file=sys.stderr)
            drop = set(unseen)
            keep = [k for i, k in enumerate(keep) if i not in drop]
            graphs = [g for i, g in enumerate(graphs) if i not in drop]
    return keep, graphs, failed


def known_elements(structure, predictor) -> bool:
    """Whether every element of ``structure`` was seen in training."""
    return {el.symbol for el in structure.composition.elements} <= predictor.elements


def ours(structures: list, ids: list[str], model: str | None, batch_size: int, repeats: int) -> tuple[dict, list]:
    """Throughput of our crystal model; return its result and the structures it accepted."""
    import torch
    from torch_geometric.data import Batch

    from sciml.crystal import load_model, predict
    from sciml.crystal.artifact import DEFAULT_MODEL
    from sciml.crystal.data.graphs import structure_to_graph

    predictor = load_model(model or DEFAULT_MODEL)
    keep, graphs, failed = accepted_graphs(structures, ids, predictor)
    chosen = [structures[k] for k in keep]
    atoms = sum(len(s) for s in chosen)
    graph_s = timed_passes(lambda: [structure_to_graph(s, predictor.graph) for s in chosen], 1)["median_s"]

    @torch.no_grad()
    def forward():
        for part in batches(graphs, batch_size):
            predictor.module.predict_step(Batch.from_data_list(part))

    forward()  # warm-up (first-call allocations)
    model_s = timed_passes(forward, repeats)
    start = time.perf_counter()
    frame = predict(chosen, predictor, batch_size=batch_size)
    api_s = time.perf_counter() - start
    result = {"model": predictor.path.name, "target": predictor.target["name"],
              "parameters": sum(p.numel() for p in predictor.module.parameters()), "structures": len(chosen),
              "atoms": atoms, "graph_failed": failed,
              "with_training_elements_only": sum(known_elements(s, predictor) for s in chosen),
              "in_domain": int((frame["in_domain"] == True).sum()),  # noqa: E712 (column of True/False/None)
              "graph": rates(len(chosen), atoms, graph_s),
              "model_pass": rates(len(chosen), atoms, model_s["median_s"]) | {
                  "min_s": round(model_s["min_s"], 3), "max_s": round(model_s["max_s"], 3)},
              "graph_and_model": rates(len(chosen), atoms, graph_s + model_s["median_s"]),
              "predict_api": rates(len(chosen), atoms, api_s)}
    return result, chosen


def chgnet(structures: list, batch_size: int, repeats: int) -> dict:
    """Throughput of CHGNet (energy only) on ``structures``; ``{"skipped": reason}`` when it is not installed."""
    try:
        from chgnet.model import CHGNet
    except ImportError:
        message = "chgnet is not installed (pip install 'sciml[bench]'): CHGNet skipped"
        print(message, file=sys.stderr)
        return {"skipped": message}
    import torch

    model = CHGNet.load(use_device="cpu", verbose=False)
    model.eval()
    atoms = sum(len(s) for s in structures)
    start = time.perf_counter()
    graphs = [model.graph_converter(s) for s in structures]
    graph_s = time.perf_counter() - start

    @torch.no_grad()
    def forward():
        for part in batches(graphs, batch_size):
            model(part, task="e")

    forward()
    model_s = timed_passes(forward, repeats)
    return {"model": f"CHGNet {model.version}", "package": f"chgnet {metadata.version('chgnet')}",
            "parameters": sum(p.numel() for p in model.parameters()), "task": "e (energy only)",
            "structures": len(structures), "atoms": atoms, "graph": rates(len(structures), atoms, graph_s),
            "model_pass": rates(len(structures), atoms, model_s["median_s"]) | {
                "min_s": round(model_s["min_s"], 3), "max_s": round(model_s["max_s"], 3)},
            "graph_and_model": rates(len(structures), atoms, graph_s + model_s["median_s"])}


def one_file_command(model: str | None, repeats: int, before: Path | None = None) -> dict:
    """Whole-process seconds of a one-file ``sciml crystal predict`` beside ``python -c "import torch"``.

    With ``before`` (another checkout, e.g. ``git worktree add /tmp/before <commit>``), the same command also runs
    from there (through ``PYTHONPATH``, as in :mod:`startup`), interleaved run by run so that both see the same load.
    """
    from startup import commit, run_once, sciml_command

    roots = {"command": ROOT} | ({"before": before.resolve()} if before else {})
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [*sciml_command(), "crystal", "predict", *(["--model", model] if model else []), ONE_FILE,
               "--output", str(Path(tmp) / "one.csv"), "--threads", "1"]
        runs = [(name, cmd, root) for name, root in roots.items()]
        runs.append(("import_torch", [sys.executable, "-c", "import torch"], ROOT))
        times = {name: [] for name, _, _ in runs}
        for k in range(repeats + 1):  # the first round warms the file cache and is not counted
            for name, argv, root in runs:
                seconds, code, last = run_once(argv, root, 1)
                if code:
                    raise SystemExit(f"error: {' '.join(argv)} in {root} exited {code}: {last}")
                if k:
                    times[name].append(seconds)
    shown = ["sciml", "crystal", "predict", *(["--model", model] if model else []), ONE_FILE, "--output",
             "$TMP/one.csv", "--threads", "1"]
    out = {"command": " ".join(shown), "yardstick": 'python -c "import torch"', "repeats": repeats,
           "import_torch_median_s": round(statistics.median(times["import_torch"]), 3), "target_s": 4.0}
    for name, root in roots.items():
        ratios = [a / b for a, b in zip(times[name], times["import_torch"], strict=True)]
        median = statistics.median(times[name])
        row = {"checkout": commit(root), "median_s": round(median, 3), "min_s": round(min(times[name]), 3),
               "max_s": round(max(times[name]), 3), "ratio_to_import_torch_median": round(statistics.median(ratios), 2)}
        out |= row if name == "command" else {"before": row}
    out["meets_target"] = out["median_s"] <= out["target_s"]
    return out


def main(argv: list[str] | None = None) -> dict:
    """Measure, write the results file (merged by case) and print a summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="crystal model name or folder (default: the shipped default)")
    parser.add_argument("--data", type=Path, default=POOL, help="CSV (.gz) with a cif column")
    parser.add_argument("--n", type=int, default=1000, help="structures to draw")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="model passes (median reported)")
    parser.add_argument("--command-repeats", type=int, default=7, help="one-file command runs (0: skip)")
    parser.add_argument("--skip-throughput", action="store_true", help="measure the one-file command only")
    parser.add_argument("--before", type=Path, default=None, help="another checkout: its one-file command too")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    header = {"what": "structures per second, 1 torch thread, torch.no_grad(); one-file command as a fresh process",
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "torch": metadata.version("torch")}}
    with results_file(args.output, header=header, merge=True) as results:
        if not args.skip_throughput:
            if not args.data.is_file():
                raise SystemExit(f"error: {args.data} not found; give --data CSV with a cif column")
            structures, ids, parse_s = read_structures(args.data, args.n, args.seed)
            mine, chosen = ours(structures, ids, args.model, args.batch_size, args.repeats)
            peer = chgnet(chosen, args.batch_size, args.repeats)
            case = {"data": args.data.name, "drawn": len(structures), "seed": args.seed,
                    "batch_size": args.batch_size, "repeats": args.repeats, "threads": torch.get_num_threads(),
                    "cif_parse": rates(len(structures), sum(len(s) for s in structures), parse_s),
                    "ours": mine, "chgnet": peer}
            if "skipped" not in peer:
                case["model_pass_speedup_vs_chgnet"] = round(peer["model_pass"]["seconds"]
                                                             / mine["model_pass"]["seconds"], 1)
            results[f"throughput:{mine['model']}"] = case
            print(f"{mine['model']}: {mine['structures']} structures; model {mine['model_pass']['structures_per_s']}"
                  f"/s, graph {mine['graph']['structures_per_s']}/s, both "
                  f"{mine['graph_and_model']['structures_per_s']}/s; predict() "
                  f"{mine['predict_api']['structures_per_s']}/s")
            if "skipped" not in peer:
                print(f"{peer['model']}: model {peer['model_pass']['structures_per_s']}/s, graph "
                      f"{peer['graph']['structures_per_s']}/s, both {peer['graph_and_model']['structures_per_s']}/s")
        if args.command_repeats:
            results["one_file_command"] = one_file_command(args.model, args.command_repeats, args.before)
            got = results["one_file_command"]
            print(f"one-file command: {got['median_s']} s (median of {got['repeats']}), "
                  f"{got['ratio_to_import_torch_median']}x `python -c 'import torch'`"
                  + (f"; before: {got['before']['median_s']} s, {got['before']['ratio_to_import_torch_median']}x"
                     if "before" in got else ""))
        results["load_average_1min_start_end"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    return results


if __name__ == "__main__":
    main()
