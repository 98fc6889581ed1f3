"""E(3)-equivariant Hamiltonian network: block ↔ irreps change of basis, layers, network (pure torch.nn)."""

from __future__ import annotations

from sciml.hamiltonian.nn.blocks import BlockBasis, shell_pair_irreps
from sciml.hamiltonian.nn.model import HamiltonianNet

__all__ = ["BlockBasis", "HamiltonianNet", "shell_pair_irreps"]
