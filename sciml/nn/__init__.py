"""Pure ``torch.nn`` building blocks and networks (no Lightning here)."""

from __future__ import annotations

from sciml.nn.cgcnn import CGCNN
from sciml.nn.diffraction import DiffractionBranch
from sciml.nn.graph_attention import GraphAttentionBlock
from sciml.nn.prdnet import PRDNet
from sciml.nn.radial import CosineCutoff, GaussianBasis

NETWORKS = {"prdnet": PRDNet, "cgcnn": CGCNN}

__all__ = ["CGCNN", "NETWORKS", "PRDNet", "CosineCutoff", "DiffractionBranch", "GaussianBasis", "GraphAttentionBlock"]
