"""Crystal networks, pure ``torch.nn`` (no Lightning): PRDNet (graph + diffraction branch), CGCNN and their mean."""

from __future__ import annotations

from sciml.crystal.nn.cgcnn import CGCNN
from sciml.crystal.nn.diffraction import DiffractionBranch
from sciml.crystal.nn.ensemble import MeanEnsemble
from sciml.crystal.nn.graph_attention import GraphAttentionBlock
from sciml.crystal.nn.prdnet import PRDNet

NETWORKS = {"prdnet": PRDNet, "cgcnn": CGCNN}
"""The networks a run trains (``model.network.name``); an artifact may also hold their mean, :class:`MeanEnsemble`."""

__all__ = ["CGCNN", "NETWORKS", "PRDNet", "DiffractionBranch", "GraphAttentionBlock", "MeanEnsemble"]
