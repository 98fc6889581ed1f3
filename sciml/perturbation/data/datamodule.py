"""PerturbationDataModule: AnnData → condition-level splits → batches of perturbed and paired control cells.

Batch contract (every loader; C conditions of N cells, G genes)::

    batch["x_pert"]      float32 (C, N, G)  log1p expression of N cells of each condition (with replacement
                                             when a condition has fewer than N cells)
    batch["x_ctrl"]      float32 (C, N, G)  N control cells of the same cell type, drawn independently
                                             (``pairing: random``, scDFM) or OT-paired to x_pert (``pairing: ot``)
    batch["pert_genes"]  int64   (C, 2)     indices into ``dm.perturbation_genes`` (-1 padding; a single has one)
    batch["condition"]   list[str] (C,)     condition keys: ``A+ctrl``, ``A+B`` (``A+B@type`` with a cell type)

``dm.perturbation_genes`` starts with ``dm.genes`` (the measured genes, in column order) and appends the
perturbed genes that were not measured (sorted), so a perturbation always has a gene index; for the simulator
and any data whose targets are measured the two lists are equal.

Memory: a sparse file stays sparse (scipy CSR) in :attr:`table`; cells are densified a condition at a time
(:meth:`PerturbationDataModule.cells`) or a batch at a time (the loaders draw rows, then densify them), and each
cell type's control cells once (:meth:`PerturbationDataModule.control_matrix`, cached; ``max_control_cells`` bounds
them). Nothing densifies the whole matrix.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, RandomSampler

from sciml.core.datamodule import SplitDataModule
from sciml.perturbation.data.anndata_io import DataError, dense_rows, select_hvg, take_columns
from sciml.perturbation.data.batches import ConditionDataset, collate
from sciml.perturbation.data.conditions import UnknownGeneError, canonical_label, gene_indices, parse_condition
from sciml.perturbation.data.graph import coexpression_knn, read_edge_list
from sciml.perturbation.data.pairing import PAIRINGS
from sciml.perturbation.data.splits import SPLIT_NAMES, make_split, write_split
from sciml.perturbation.data.table import CellTable, cap_rows, load_table, make_key, split_key

log = logging.getLogger(__name__)

FORMAT = "sciml.cells/1"
SPLIT_DEFAULTS = {"kind": "combo_seen2", "seed": 0, "holdout": 0.5, "fractions": [0.2, 0.4, 0.4],
                  "holdout_cell_type": None}


class PerturbationDataModule(SplitDataModule):
    """Perturbation data over AnnData (docs/design.md §3); see the module docstring for the batch contract.

    Parameters
    ----------
    path : str
        ``.h5ad`` file, cells × genes.
    condition_key : str
        ``obs`` column with condition labels (GEARS ``ctrl`` / ``A+ctrl`` / ``A+B``, or scPerturb ``A`` / ``A+B``).
    control_label : str
        Label of control cells in that column (``ctrl``, ``control``, ...).
    counts_layer : str or None
        Layer with raw counts (normalised here to log1p counts-per-``target_sum``); ``None``: ``X`` is log1p.
    n_hvg : int or None
        Highly variable genes kept (computed on training and control cells; measured perturbed genes always kept).
    cells_per_condition, conditions_per_batch : int
        N and C of the batch contract.
    split : dict
        :func:`sciml.perturbation.data.splits.make_split` arguments (``kind``, ``seed``, ``holdout``, ``fractions``,
        ``holdout_cell_type``).
    pairing : ``random`` or ``ot``.
    gene_graph : str or None
        Two-column edge-list file; ``None``: co-expression kNN with ``knn`` neighbours on training cells.
    cell_type_key, subset : optional ``obs`` column of cell types; ``{column: value(s)}`` filter of cells.
    max_control_cells : int or None
        At most this many control cells per cell type, a draw seeded by the split seed (``None``: all). Bounds the
        memory of the densified controls and the cost of everything computed on them.
    genes : list or None
        Frozen gene vocabulary (e.g. from an artifact); the file must hold these genes in this order.
    steps_per_epoch : int
        Training batches per epoch (conditions are drawn with replacement).
    eval_seed : int
        Seed of the fixed cells drawn by val / calib / test loaders.
    run_dir : str or None
        Where ``split.json`` is written.

    """

    def __init__(self, path: str, condition_key: str = "condition", control_label: str = "ctrl",
                 counts_layer: str | None = None, target_sum: float = 1e4, n_hvg: int | None = None,
                 cells_per_condition: int = 64, conditions_per_batch: int = 4, split: dict | None = None,
                 pairing: str = "random", gene_graph: str | None = None, knn: int = 30,
                 cell_type_key: str | None = None, subset: dict | None = None, genes: list[str] | None = None,
                 steps_per_epoch: int = 100, eval_seed: int = 0, num_workers: int = 0,
                 max_control_cells: int | None = None, run_dir: str | None = None) -> None:
        super().__init__()
        if pairing not in PAIRINGS:
            raise ValueError(f"data.pairing {pairing!r} unknown; choose one of {list(PAIRINGS)}")
        self.opts = dict(path=str(path), condition_key=condition_key, control_label=control_label,
                         counts_layer=counts_layer, target_sum=float(target_sum), n_hvg=n_hvg,
                         cells_per_condition=int(cells_per_condition), conditions_per_batch=int(conditions_per_batch),
                         pairing=pairing, gene_graph=gene_graph, knn=int(knn), cell_type_key=cell_type_key,
                         subset=subset, steps_per_epoch=int(steps_per_epoch), eval_seed=int(eval_seed),
                         num_workers=int(num_workers),
                         max_control_cells=None if max_control_cells is None else int(max_control_cells),
                         run_dir=run_dir)
        self.split_cfg = SPLIT_DEFAULTS | (split or {})
        self.frozen_genes = list(genes) if genes is not None else None
        self.genes: list[str] = []
        self.perturbation_genes: list[str] = []
        self.conditions: dict[str, list[str]] = {}
        self.split_category: dict[str, str] = {}
        self.split: dict = {}
        self.gene_graph: torch.Tensor | None = None
        self.table: CellTable | None = None
        self._controls: dict[str, np.ndarray] = {}
        self._control_moments: dict[str | None, tuple[np.ndarray, np.ndarray]] = {}

    @classmethod
    def from_config(cls, data: dict, run_dir: str | None = None) -> PerturbationDataModule:
        """Build from a config ``data:`` section (keys are the constructor's arguments)."""
        data = dict(data)
        unknown = set(data) - set(cls.__init__.__code__.co_varnames[1:cls.__init__.__code__.co_argcount])
        if unknown:
            raise ValueError(f"config section 'data' has unknown keys {sorted(unknown)}")
        return cls(**({"run_dir": run_dir} | data))

    # ------------------------------------------------------------------ setup
    def setup(self, stage: str | None = None) -> None:
        """Read, validate, split, select genes and build the gene graph (once)."""
        if self.table is not None:
            return
        o = self.opts
        table = load_table(o["path"], o["condition_key"], o["control_label"], o["counts_layer"], o["target_sum"],
                           o["cell_type_key"], o["subset"], self.frozen_genes)
        for key in table.control_keys():
            table.index[key] = cap_rows(table.index[key], o["max_control_cells"], int(self.split_cfg["seed"]))
        perturbed = {k: g for k, g in table.perturbation.items() if g}
        self.split = make_split(perturbed, cell_types=table.cell_type, **self.split_cfg)
        self.conditions = {name: self.split[name] for name in SPLIT_NAMES}
        self.split_category = dict(self.split["category"])
        train_rows = np.concatenate([table.index[k] for k in self.conditions["train"] + table.control_keys()])
        keep = sorted({g for genes in table.perturbation.values() for g in genes})
        if self.frozen_genes is None:
            chosen = select_hvg(table.x[train_rows], table.var_names, o["n_hvg"], keep=keep)
            cols = [table.var_names.index(g) for g in chosen] if len(chosen) < len(table.var_names) else None
            if cols is not None:
                table.x = take_columns(table.x, cols)
                table.var_names = chosen
        self.table = table
        self.genes = list(table.var_names)
        self.perturbation_genes = self.genes + sorted(set(keep) - set(self.genes))
        self._index = {g: i for i, g in enumerate(self.perturbation_genes)}
        if o["gene_graph"]:
            self.gene_graph = read_edge_list(o["gene_graph"], self.genes)
        else:
            self.gene_graph = coexpression_knn(table.x[train_rows], o["knn"])
        if o["run_dir"] and self.trainer_is_rank_zero():
            write_split(Path(o["run_dir"]) / "split.json", self.split)
        log.info("perturbation data: %d cells, %d genes, conditions per split %s", table.n_cells, len(self.genes),
                 {k: len(v) for k, v in self.conditions.items()})

    def trainer_is_rank_zero(self) -> bool:
        """True outside a Lightning run and on global rank 0 (only rank 0 writes ``split.json``)."""
        trainer = getattr(self, "trainer", None)
        return trainer is None or bool(trainer.is_global_zero)

    def _require(self) -> CellTable:
        if self.table is None:
            raise RuntimeError("call dm.setup() first")
        return self.table

    # ------------------------------------------------------------------ access
    def cells(self, condition: str) -> np.ndarray:
        """Expression (n, G) float32 of all cells of a condition key (canonicalised: ``B+A`` → ``A+B``)."""
        table = self._require()
        key = self.key(condition)
        if key not in table.index:
            raise KeyError(f"condition {condition!r} has no cells in {table.source}")
        return dense_rows(table.x, table.index[key])

    def control_matrix(self, condition: str | None = None) -> np.ndarray:
        """Control cells (n_ctrl, G): of the condition's cell type when given, else all control cells.

        Densified once per cell type and cached: the same array is returned to every caller (do not modify it).
        """
        table = self._require()
        keys = table.control_keys()
        if condition is not None:
            keys = [make_key("ctrl", table.cell_type.get(self.key(condition), ""))]
        parts = []
        for k in keys:
            if k not in self._controls:
                self._controls[k] = dense_rows(table.x, table.index[k])
            parts.append(self._controls[k])
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def control_moments(self, condition: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Mean ``(G,)`` and squared standard error of the mean ``(G,)`` of :meth:`control_matrix`, cached.

        The standard error is ``var(ddof=1)/n`` (0 for a single cell); computed once per cell type, not once per
        condition measured against those controls.
        """
        key = None if condition is None else self._require().cell_type.get(self.key(condition), "")
        if key not in self._control_moments:
            c = self.control_matrix(condition)
            var = c.var(axis=0, ddof=1) / len(c) if len(c) > 1 else np.zeros(c.shape[1])
            self._control_moments[key] = (c.mean(0), var)
        return self._control_moments[key]

    def key(self, condition: str) -> str:
        """Condition key of a label in any accepted convention (cell-type suffix kept)."""
        label, cell_type = split_key(condition)
        return make_key(canonical_label(label, self.opts["control_label"]), cell_type)

    def perturbation(self, condition: str) -> tuple[str, ...]:
        """Sorted perturbed genes of a condition key or label."""
        return parse_condition(split_key(condition)[0], self.opts["control_label"])

    def encode(self, condition: str) -> list[int]:
        """``pert_genes`` row of a condition: indices into :attr:`perturbation_genes`, -1 padded to 2.

        Raises :class:`~sciml.perturbation.data.conditions.UnknownGeneError` naming any gene outside the vocabulary.
        """
        self._require()
        return gene_indices(self.perturbation(condition), self._index)

    # ------------------------------------------------------------------ loaders
    def dataset(self, split: str, length: int | None = None, fixed_seed: int | None = None) -> ConditionDataset:
        """The :class:`ConditionDataset` of a split (``train``, ``val``, ``calib``, ``test``)."""
        table = self._require()
        keys = self.conditions[split]
        cells = {k: table.x[table.index[k]] for k in keys}  # sparse rows stay sparse: densified when drawn
        controls = {k: self.control_matrix(k) for k in keys}
        codes = {k: self.encode(k) for k in keys}
        return ConditionDataset(keys, cells, controls, codes, self.opts["cells_per_condition"],
                                self.opts["pairing"], length, fixed_seed)

    def loader(self, split: str, shuffle: bool = False) -> DataLoader:
        """Training: ``steps_per_epoch`` batches of C conditions drawn with replacement, cells re-drawn every time.

        Other splits: each condition once, with fixed cells (seeded by ``eval_seed``).
        """
        if split != "train":
            return self._eval_loader(split)
        c = self.opts["conditions_per_batch"]
        ds = self.dataset("train", length=self.opts["steps_per_epoch"] * c)
        return DataLoader(ds, batch_size=c, sampler=RandomSampler(ds), collate_fn=collate,
                          num_workers=self.opts["num_workers"], drop_last=True)

    def _eval_loader(self, split: str) -> DataLoader:
        ds = self.dataset(split, fixed_seed=self.opts["eval_seed"])
        return DataLoader(ds, batch_size=self.opts["conditions_per_batch"], shuffle=False, collate_fn=collate,
                          num_workers=self.opts["num_workers"])




    # ------------------------------------------------------------------ artifact
    def to_dict(self) -> dict:
        """Metadata frozen into an artifact: vocabularies, conventions, split and data hash."""
        table = self._require()
        o = self.opts
        return {"format": FORMAT, "genes": self.genes, "perturbation_genes": self.perturbation_genes,
                "condition_key": o["condition_key"], "control_label": o["control_label"],
                "counts_layer": o["counts_layer"], "target_sum": o["target_sum"], "cell_type_key": o["cell_type_key"],
                "subset": o["subset"], "expression": "log1p(counts / library_size * target_sum)",
                "condition_labels": "GEARS: ctrl, A+ctrl, A+B (sorted); A+B@cell_type with a cell-type column",
                "pairing": o["pairing"], "split": {k: self.split[k] for k in ("kind", "seed")},
                "conditions": self.conditions, "split_category": self.split_category,
                "data_sha256": table.sha256, "source": table.source}


__all__ = ["PerturbationDataModule", "DataError", "UnknownGeneError"]
