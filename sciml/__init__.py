"""sciml: scientific machine learning for materials and single cells, with calibrated uncertainty.

Importing the package has no side effects: no directories are created, no global dtype is set and
nothing is downloaded. Heavy modules are imported by the subpackages that need them.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
