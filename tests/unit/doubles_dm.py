"""A stand-in for the data-module surface that a screen is read from, and the screen of a test model."""

from __future__ import annotations

import torch

from sciml.perturbation.prior import Singles
from sciml.perturbation.screen import Screen, double_keys, read_doubles


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

    def control_moments(self, key=None):
        return self.control_matrix(key)[0], torch.zeros(self.n_genes).numpy()  # one control cell: no variance


def screen_of(model, dm) -> Screen:
    """The :class:`~sciml.perturbation.screen.Screen` of ``model``'s singles and the doubles of ``dm``."""
    stored = model.singles()
    singles = Singles(stored.effect.clone(), stored.var.clone(), stored.known.clone(), stored.rows)
    doubles = {split: read_doubles(dm, double_keys(dm, singles.known, split)) for split in ("train", "val")}
    ctrl_mean = model.ctrl_mean if hasattr(model, "ctrl_mean") else torch.zeros(dm.n_genes)
    return Screen(singles, doubles, [], ctrl_mean, None, [])
