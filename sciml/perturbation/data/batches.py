"""Torch datasets producing the perturbation batch contract (see :mod:`sciml.perturbation.data.datamodule`)."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

from sciml.perturbation.data.anndata_io import dense_rows, n_rows
from sciml.perturbation.data.pairing import draw, pair

X_PERT = "x_pert"  # (C, N, G) float32, log1p expression of perturbed cells
X_CTRL = "x_ctrl"  # (C, N, G) float32, log1p expression of paired control cells
PERT_GENES = "pert_genes"  # (C, 2) int64, indices into dm.perturbation_genes, -1 padding
CONDITION = "condition"  # list[str] of length C, condition keys


class ConditionDataset(Dataset):
    """One item = one condition: N perturbed cells and N paired control cells.

    Parameters
    ----------
    keys : condition keys to draw from; item ``i`` is ``keys[i % len(keys)]``.
    cells : key -> (n, G) float32 expression of that condition (dense, or scipy CSR: only the drawn rows are
        densified).
    controls : key -> (n_ctrl, G) control cells paired with that condition (same cell type).
    pert_genes : key -> list of 2 int indices (-1 padded).
    n_cells : N, cells per condition (with replacement when a condition has fewer).
    pairing : ``random`` or ``ot``.
    length : dataset length (training: steps · C; evaluation: ``len(keys)``).
    fixed_seed : ``None`` for training (randomness from torch's global RNG, so Lightning seeding and
        checkpointed RNG states apply); an int for evaluation (item ``i`` always returns the same cells).

    """

    def __init__(self, keys: list[str], cells: dict, controls: dict, pert_genes: dict, n_cells: int,
                 pairing: str = "random", length: int | None = None, fixed_seed: int | None = None) -> None:
        if not keys:
            raise ValueError("no conditions to sample from")
        self.keys, self.cells, self.controls, self.pert_genes = list(keys), cells, controls, pert_genes
        self.n_cells, self.pairing, self.fixed_seed = int(n_cells), pairing, fixed_seed
        self.length = int(length or len(keys))

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict:
        key = self.keys[i % len(self.keys)]
        seed = (self.fixed_seed, i) if self.fixed_seed is not None else int(torch.randint(2**62, (1,)))
        rng = np.random.default_rng(seed)
        pert, ctrl = self.cells[key], self.controls[key]
        x_pert = dense_rows(pert, draw(n_rows(pert), self.n_cells, rng))
        x_ctrl = pair(dense_rows(ctrl, draw(n_rows(ctrl), self.n_cells, rng)), x_pert, self.pairing)
        return {X_PERT: x_pert, X_CTRL: x_ctrl, PERT_GENES: self.pert_genes[key], CONDITION: key}


def collate(items: list[dict]) -> dict:
    """Stack items into the batch contract: tensors (C, N, G), (C, 2) and a list of C condition keys."""
    return {
        X_PERT: torch.as_tensor(np.stack([it[X_PERT] for it in items]), dtype=torch.float32),
        X_CTRL: torch.as_tensor(np.stack([it[X_CTRL] for it in items]), dtype=torch.float32),
        PERT_GENES: torch.as_tensor(np.array([it[PERT_GENES] for it in items]), dtype=torch.long),
        CONDITION: [it[CONDITION] for it in items],
    }
