"""Electronic-structure Hamiltonians: public Python API.

>>> from sciml.hamiltonian import predict
>>> results = predict(["examples/hamiltonian/water.xyz"], model="water-pbe-def2svp")  # doctest: +SKIP
>>> results[0].gap.gap  # HOMO–LUMO gap, Hartree  # doctest: +SKIP

Models: :func:`load_model` (molecule and crystal models), :func:`predict` (molecules, typed
:class:`MoleculePrediction` results). Data: :class:`OrbitalLayout` (pyscf <-> e3nn basis),
:class:`HamiltonianStructure` (DeepH-keyed blocks in e3nn order, Hartree), the npz format (:func:`read_npz`,
:func:`write_npz`), the DeepH folder layout (:func:`read_deeph`, :func:`write_deeph`); Bloch sums for crystals in
:mod:`sciml.hamiltonian.periodic`. The names are imported on first use (PEP 562), so ``import sciml.hamiltonian``
does not pay for torch, e3nn or pyscf until a model is needed.
"""

from __future__ import annotations

from sciml.core.lazy import keep_public_names, lazy_exports

#: public name -> module defining it
_EXPORTS = {"HamiltonianPredictor": "sciml.hamiltonian.artifact", "load_model": "sciml.hamiltonian.artifact",
            "MoleculePrediction": "sciml.hamiltonian.results", "predict": "sciml.hamiltonian.predict",
            "HamiltonianStructure": "sciml.hamiltonian.structure", "OrbitalLayout": "sciml.hamiltonian.orbitals",
            "block_wigner": "sciml.hamiltonian.orbitals", "wigner_D": "sciml.hamiltonian.harmonics",
            "read_deeph": "sciml.hamiltonian.data.deeph", "read_deeph_tree": "sciml.hamiltonian.data.deeph",
            "write_deeph": "sciml.hamiltonian.data.deeph", "read_npz": "sciml.hamiltonian.data.npz",
            "write_npz": "sciml.hamiltonian.data.npz"}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
keep_public_names(__name__)
