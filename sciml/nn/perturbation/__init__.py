"""Pure ``torch.nn`` pieces of the perturbation-response flow model (no Lightning)."""

from sciml.nn.perturbation.attention import DifferentialAttention, lambda_init
from sciml.nn.perturbation.backbone import PADBlock, PADTransformer
from sciml.nn.perturbation.flow import PATHS, ControlPath, FlowPath, NoisePath, mmd2, ot_pairing
from sciml.nn.perturbation.graph import adjacency_from_edges, propagate
from sciml.nn.perturbation.ode import integrate

__all__ = ["PATHS", "ControlPath", "DifferentialAttention", "FlowPath", "NoisePath", "PADBlock", "PADTransformer",
           "adjacency_from_edges", "integrate", "lambda_init", "mmd2", "ot_pairing", "propagate"]
