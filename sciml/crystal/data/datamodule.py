"""CrystalDataModule: labelled structures → graphs → seeded train/val/calib/test loaders."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch_geometric.loader import DataLoader
from tqdm.auto import tqdm

from sciml.core.datamodule import SplitDataModule
from sciml.core.splits import SPLIT_NAMES, random_split, write_split
from sciml.crystal.data.graphs import GraphSettings, structure_to_graph
from sciml.crystal.data.sources import read_labelled

log = logging.getLogger(__name__)


class CrystalDataModule(SplitDataModule):
    """Structures with a scalar target, as PyG graphs with reflections.

    Parameters
    ----------
    path : str
        CSV with a ``cif`` column (perov5 format) or a folder with ``id_prop.csv``.
    target : str
        Target column of the CSV (ignored for ``id_prop.csv``, whose second column is the target).
    unit : str
        Unit of the target, stored in the artifact (e.g. ``"eV/cell"``).
    extensive : bool
        ``True`` when the target scales with the cell (eV per cell): the network then learns ``y / n_atoms``.
    graph : dict
        :class:`~sciml.crystal.data.graphs.GraphSettings` fields.
    split : dict
        ``fractions`` (train, val, calib, test) and ``seed``.
    batch_size, num_workers : int
        Loader settings (``batch_size`` per process under DDP).
    limit : int or None
        Use only the first ``limit`` rows (for smoke tests).
    run_dir : str or None
        Where ``split.json`` is written.

    """

    def __init__(self, path: str, target: str, unit: str = "", extensive: bool = False,
                 graph: dict | None = None, split: dict | None = None, batch_size: int = 64,
                 num_workers: int = 0, limit: int | None = None, run_dir: str | None = None) -> None:
        super().__init__()
        # plain attributes, not save_hyperparameters(): the model owns the hparams stored in checkpoints
        self.opts = SimpleNamespace(path=path, target=target, extensive=extensive, batch_size=batch_size,
                                    num_workers=num_workers, limit=limit, run_dir=run_dir)
        self.graph = GraphSettings.from_dict(graph or {})
        split = {"fractions": [0.8, 0.1, 0.05, 0.05], "seed": 42} | (split or {})
        self.fractions, self.seed = split["fractions"], int(split["seed"])
        self.datasets: dict[str, list] = {}
        self.elements: list[str] = []
        self.target_mean = 0.0
        self.target_std = 1.0

    def setup(self, stage: str | None = None) -> None:
        """Read, featurise and split the data (once)."""
        if self.datasets:
            return
        table = read_labelled(self.opts.path, self.opts.target)
        if self.opts.limit:
            table = table.iloc[: self.opts.limit]
        graphs = []
        for row in tqdm(table.itertuples(), total=len(table), desc="graphs", leave=False):
            g = structure_to_graph(row.structure, self.graph, source=str(row.id))
            g.y = torch.tensor([float(row.y)], dtype=torch.float32)
            graphs.append(g)
        split = random_split(len(graphs), self.fractions, self.seed)
        self.datasets = {name: [graphs[i] for i in idx] for name, idx in split.items()}
        if self.opts.run_dir:
            write_split(Path(self.opts.run_dir) / "split.json", list(table["id"]), split, self.seed)
        train_rows = table.iloc[split["train"]]
        self.elements = sorted({el.symbol for s in train_rows["structure"] for el in s.composition.elements})
        y = np.array([float(v) / (len(s) if self.opts.extensive else 1)
                      for v, s in zip(train_rows["y"], train_rows["structure"], strict=True)])
        self.target_mean, self.target_std = float(y.mean()), float(y.std() + 1e-12)
        log.info("split sizes: %s", {k: len(v) for k, v in self.datasets.items()})

    def loader(self, name: str, shuffle: bool = False) -> DataLoader:
        return DataLoader(self.datasets[name], batch_size=self.opts.batch_size, shuffle=shuffle,
                          num_workers=self.opts.num_workers)





    def split_sizes(self) -> dict[str, int]:
        """Number of structures in each split."""
        return {name: len(self.datasets.get(name, [])) for name in SPLIT_NAMES}
