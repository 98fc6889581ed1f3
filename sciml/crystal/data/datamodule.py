"""CrystalDataModule: labelled structures → graphs → seeded train/val/calib/test loaders."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import torch
from pymatgen.core import Element
from torch_geometric.loader import DataLoader

from sciml.core import keys
from sciml.core.datamodule import SplitDataModule
from sciml.core.splits import SPLIT_NAMES, random_split, write_split
from sciml.crystal.data.featurise import labelled_graphs
from sciml.crystal.data.graphs import GraphSettings

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
    workers : int
        Processes that parse and featurise CSV rows (:func:`~sciml.crystal.data.featurise.labelled_graphs`).
    cache : str or None
        Folder for a tensor cache of the graphs, reused by later runs on the same data and settings.
    zero_inflated : bool
        The target is ``>= 0`` with a point mass at 0 (band gaps: metals); its statistics are those of the
        positive values.
    zero_label : str
        What ``y = 0`` means (``metal`` for band gaps): prediction files name the probability column ``p_<label>``.
    limit : int or None
        Use only the first ``limit`` rows (for smoke tests).
    run_dir : str or None
        Where ``split.json`` is written.

    """

    def __init__(self, path: str, target: str, unit: str = "", extensive: bool = False,
                 graph: dict | None = None, split: dict | None = None, batch_size: int = 64,
                 num_workers: int = 0, limit: int | None = None, run_dir: str | None = None, workers: int = 1,
                 cache: str | None = None, zero_inflated: bool = False,
                 zero_label: str = "zero") -> None:
        super().__init__()
        # plain attributes, not save_hyperparameters(): the model owns the hparams stored in checkpoints
        self.opts = SimpleNamespace(path=path, target=target, extensive=extensive, batch_size=batch_size,
                                    num_workers=num_workers, limit=limit, run_dir=run_dir, workers=workers,
                                    cache=cache, zero_inflated=zero_inflated)
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
        ids, graphs = labelled_graphs(self.opts.path, self.opts.target, self.graph, self.opts.workers,
                                      self.opts.limit, self.opts.cache)
        split = random_split(len(graphs), self.fractions, self.seed)
        self.datasets = {name: [graphs[i] for i in idx] for name, idx in split.items()}
        if self.opts.run_dir:
            write_split(Path(self.opts.run_dir) / "split.json", ids, split, self.seed)
        train = self.datasets["train"]
        numbers = torch.unique(torch.cat([g[keys.ATOMIC_NUMBERS] for g in train]))
        self.elements = sorted(Element.from_Z(int(z)).symbol for z in numbers)
        y = torch.cat([g.y / (g[keys.N_ATOMS] if self.opts.extensive else 1) for g in train]).double()
        if self.opts.zero_inflated:  # the regression part sees the positive values only
            if (y < 0).any():
                raise ValueError(f"{self.opts.path}: data.zero_inflated needs a target >= 0; "
                                 f"{self.opts.target} has {int((y < 0).sum())} negative training values")
            y = y[y > 0]
        self.target_mean, self.target_std = float(y.mean()), float(y.std(unbiased=False) + 1e-12)
        log.info("split sizes: %s", {k: len(v) for k, v in self.datasets.items()})

    def loader(self, name: str, shuffle: bool = False) -> DataLoader:
        return DataLoader(self.datasets[name], batch_size=self.opts.batch_size, shuffle=shuffle,
                          num_workers=self.opts.num_workers)

    def split_sizes(self) -> dict[str, int]:
        """Number of structures in each split."""
        return {name: len(self.datasets.get(name, [])) for name in SPLIT_NAMES}
