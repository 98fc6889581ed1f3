"""Test helpers shipped with sciml (invariance checks for any crystal network)."""

from __future__ import annotations

from sciml.testing.invariance import (
    assert_invariant,
    permute,
    random_orthogonal,
    rotate,
    supercell,
    translate,
)

__all__ = ["assert_invariant", "permute", "random_orthogonal", "rotate", "supercell", "translate"]
