"""A stand-in for the data-module surface that the prior choices read (``choose_shrink``, ``choose_masking``)."""

from __future__ import annotations

import torch


class DoublesDM:
    """Conditions ``"gA+gB"`` whose mean cells are ``ctrl + deltas[key]`` over a control at level ``ctrl`` (G genes)."""

    def __init__(self, deltas: dict, conditions: dict, n_genes: int, ctrl: float = 0.0) -> None:
        self.deltas, self.conditions, self.n_genes, self.ctrl = deltas, conditions, n_genes, ctrl

    def encode(self, key):
        return [int(g[1:]) for g in key.split("+")]

    def perturbation(self, key):
        return tuple(key.split("+"))

    def cells(self, key):
        return (self.ctrl + self.deltas[key])[None].numpy()

    def control_matrix(self, key=None):
        return torch.full((1, self.n_genes), self.ctrl).numpy()
