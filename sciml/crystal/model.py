"""CrystalModel: the crystal property predictor as a pure torch module (what prediction loads; no Lightning).

A network of :data:`sciml.crystal.nn.NETWORKS` predicts a standardised intensive value ``z``; the target is
``ŷ = (z·σ + μ)·n`` with ``n = n_atoms`` for extensive targets (eV per cell) and ``n = 1`` otherwise.

A zero-inflated target (``target["zero_inflated"]``: ``y >= 0`` with a point mass at 0, e.g. band gaps, 0 for
metals) is a hurdle model: the network gives a logit ``ℓ`` and ``z``; ``p₀ = sigmoid(ℓ)`` is the probability
that ``y = 0`` and ``y₊ = max((z·σ + μ)·n, 0)`` the value if it is not (``μ, σ`` of the positive values). The
point prediction is the mixture's median: 0 when ``p₀ >= 1/2``, else ``y₊``; it is never negative.
Training adds the loss and the optimiser on top (:class:`sciml.crystal.module.CrystalRegressor`); keeping
Lightning out of this module keeps it out of ``sciml crystal predict``.
"""

from __future__ import annotations

import torch
from pymatgen.core import Element

from sciml.core import keys
from sciml.core.types import Prediction
from sciml.crystal.calibration import graph_structures
from sciml.crystal.data.graphs import GraphSettings
from sciml.crystal.nn import NETWORKS, MeanEnsemble
from sciml.crystal.nn.embedding import AtomGraphEncoder

EMBEDDING_LAYERS = ("pooled", "hidden")
ARCHITECTURES = NETWORKS | {"ensemble": MeanEnsemble}  # what a model holds: a trained network or a mean of them
# Network settings that no longer exist, with why. Artifacts and checkpoints written before carry them: they are
# dropped here (weights are unaffected: the setting created no parameters); new configs should not name them.
RETIRED_NETWORK_KEYS = {"heads": "PRDNet's graph attention is per channel; `heads` never changed the network"}


def current_network(network: dict) -> dict:
    """``network`` settings without :data:`RETIRED_NETWORK_KEYS` (for artifacts and checkpoints written before)."""
    return {k: v for k, v in network.items() if k not in RETIRED_NETWORK_KEYS}


class CrystalModel(torch.nn.Module):
    """A crystal network on a scalar target, with the normalisation frozen from the training split.

    Parameters
    ----------
    network : dict
        ``name`` (key of :data:`ARCHITECTURES`: a trained network or ``ensemble``) and keyword arguments; retired keys
        (:data:`RETIRED_NETWORK_KEYS`, e.g. ``heads``) are dropped.
    graph : dict
        Graph settings the data were built with (:class:`~sciml.crystal.data.graphs.GraphSettings`).
    target : dict
        ``name``, ``unit``, ``extensive``, ``mean``, ``std`` (statistics of the training split).
    elements : list of str
        Elements seen in training; others are predicted from their descriptors only and flagged.
    **training
        Training settings (``optim``): kept in :attr:`config` only.

    Attributes
    ----------
    config : dict
        The constructor's arguments without retired network keys (an artifact's ``module`` section).

    """

    def __init__(self, network: dict, graph: dict, target: dict, elements: list[str], **training) -> None:
        super().__init__()
        network = current_network(network)
        self.config = {"network": network, "graph": graph, "target": dict(target), "elements": list(elements),
                       **training}
        self.graph = GraphSettings.from_stored(graph)
        kwargs = {k: v for k, v in network.items() if k != "name"} | ({"n_out": 2} if target.get("zero_inflated")
                                                                      else {})
        if network["name"] not in ARCHITECTURES:
            raise ValueError(f"unknown network {network['name']!r}; known: {sorted(ARCHITECTURES)}")
        self.net = ARCHITECTURES[network["name"]](cutoff=self.graph.cutoff, g_max=self.graph.g_max, **kwargs)
        seen = [Element(e).Z for e in elements]
        for encoder in (m for m in self.net.modules() if isinstance(m, AtomGraphEncoder)):  # every ensemble member's
            encoder.restrict_to(seen)

    @property
    def target(self) -> dict:
        """``name``, ``unit``, ``extensive``, ``mean``, ``std`` of the target (from :attr:`config`)."""
        return self.config["target"]

    @property
    def elements(self) -> list[str]:
        """Elements seen in training (from :attr:`config`)."""
        return self.config["elements"]

    def _scale(self, batch) -> torch.Tensor:
        n = batch[keys.N_ATOMS].to(batch[keys.POS].dtype)
        return n if self.target["extensive"] else torch.ones_like(n)

    def _denormalise(self, z: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return (z * self.target["std"] + self.target["mean"]) * scale

    @property
    def zero_inflated(self) -> bool:
        """Whether the target is zero-inflated (module docstring)."""
        return bool(self.target.get("zero_inflated"))

    def parts(self, batch) -> tuple[torch.Tensor | None, torch.Tensor]:
        """``(p₀, y₊)``, each ``(n_graphs,)``: probability of ``y = 0`` (None unless zero-inflated) and the value.

        For a plain target ``y₊`` is the prediction itself; for a zero-inflated one it is the value if ``y > 0``,
        clipped at 0.
        """
        out = self.net(batch)
        if not self.zero_inflated:
            return None, self._denormalise(out, self._scale(batch))
        return torch.sigmoid(out[:, 0]), self._denormalise(out[:, 1], self._scale(batch)).clamp_min(0.0)

    def forward(self, batch) -> torch.Tensor:
        """Predicted target per structure, shape ``(n_graphs,)``, in the target unit."""
        p_zero, value = self.parts(batch)
        return value if p_zero is None else torch.where(p_zero >= 0.5, torch.zeros_like(value), value)

    def embed(self, batch, layer: str = "pooled") -> torch.Tensor:
        """Learned representation of each structure, shape ``(n_graphs, d)``, for the applicability domain.

        Parameters
        ----------
        batch : torch_geometric.data.Batch
            Crystal graphs.
        layer : str
            ``"pooled"``: the pooled structure features the head reads (PRDNet: ``[mean_j h_j ; D]``,
            ``d = 2·dim``); ``"hidden"``: the head's hidden layer after its activation (``d = dim``).
            Both are invariant to rotation, translation, atom order and cell choice.

        """
        if layer not in EMBEDDING_LAYERS:
            raise ValueError(f"unknown embedding layer {layer!r}; use one of {EMBEDDING_LAYERS}")
        z = self.net.embed(batch)
        return self.net.head[:-1](z) if layer == "hidden" else z

    def batch_items(self, batch) -> list:
        """The structures of ``batch``, for calibrators that group by structure (:mod:`sciml.crystal.calibration`)."""
        return graph_structures(batch)

    def predict_step(self, batch, batch_idx: int = 0) -> Prediction:
        p_zero, value = self.parts(batch)
        meta = {"target": self.target["name"], "unit": self.target["unit"]}
        if p_zero is None:
            return Prediction(mean=value, sigma=self._scale(batch), meta=meta)
        mean = torch.where(p_zero >= 0.5, torch.zeros_like(value), value)
        return Prediction(mean=mean, sigma=self._scale(batch), meta=meta | {"p_zero": p_zero, "positive": value})
