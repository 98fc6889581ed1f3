"""Pure ``torch.nn`` pieces of the perturbation-response flow model (no Lightning)."""

from sciml.perturbation.nn.attention import DifferentialAttention, lambda_init
from sciml.perturbation.nn.backbone import PADBlock, PADTransformer
from sciml.perturbation.nn.flow import PATHS, ControlPath, FlowPath, NoisePath
from sciml.perturbation.nn.graph import adjacency_from_edges, propagate
from sciml.perturbation.nn.masking import close, closure_terms, masking_prior
from sciml.perturbation.nn.ode import integrate
from sciml.perturbation.nn.projection import project_mean

__all__ = ["PATHS", "ControlPath", "DifferentialAttention", "FlowPath", "NoisePath", "PADBlock", "PADTransformer",
           "adjacency_from_edges", "close", "closure_terms", "integrate", "lambda_init",
           "masking_prior", "project_mean", "propagate"]
