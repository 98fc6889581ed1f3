"""An SCF's starting density from a model's predicted Hamiltonian (``sciml data hamiltonian --seed-model PATH``).

The model predicts ``H`` from the molecule's ``H0`` and ``S`` (built its own way,
:mod:`sciml.hamiltonian.scf.molecule`); the starting density is the closed-shell density of that ``H``: solve
``H C = S C ε`` and fill the ``n_occ`` lowest orbitals, ``D = 2 C_occ C_occᵀ`` (pyscf AO order). With ``refine`` K > 0
the prediction is first refined by K of the model's own Fock builds with Newton steps
(:mod:`sciml.hamiltonian.scf.refine`, what ``predict --refine K`` does), which costs less than the SCF cycles it saves
(``docs/hamiltonian.md``). A molecule with an element the model never saw starts from pyscf's ``minao`` guess
instead. The data engine receives a
:class:`ModelGuess` as a plain callable, so ``sciml.hamiltonian.data`` does not import prediction.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["ModelGuess"]

#: DFT grid level of the H0 the model predicts from (that of prediction, :func:`~sciml.hamiltonian.scf.molecule.
#: zeroth_step`)
MODEL_GRID_LEVEL = 3


class ModelGuess:
    """``guess(numbers, positions[, zeroth])`` -> starting density (pyscf order) from a model's prediction, or None.

    Parameters
    ----------
    path : str or Path
        A Hamiltonian model folder or shipped name (:func:`sciml.hamiltonian.artifact.load_model`).
    basis : str
        The SCF's basis; a model trained in another basis is refused here (one-line ValueError).
    refine : int
        Fock builds refining the prediction before its density is taken (0: the prediction as it is).

    The model loads lazily, once per process (instances are pickled to worker processes by path).

    """

    def __init__(self, path: str | Path, basis: str, refine: int = 0):
        if refine < 0:
            raise ValueError(f"--seed-refine must be >= 0 Fock builds, got {refine}")
        self.path, self.basis, self.refine = str(path), basis, int(refine)
        self._predictor = None
        predictor = self.predictor
        if predictor.periodic:
            raise ValueError(f"--seed-model {path}: a crystal model; seeding needs a molecule model")
        if predictor.basis.lower() != basis.lower():
            raise ValueError(f"--seed-model {path} was trained in basis {predictor.basis}, the SCF uses {basis}; "
                             "give a model of the same basis")

    def __getstate__(self) -> dict:
        return {"path": self.path, "basis": self.basis, "refine": self.refine}

    def __setstate__(self, state: dict) -> None:
        self.path, self.basis, self.refine, self._predictor = state["path"], state["basis"], state["refine"], None

    @property
    def predictor(self):
        """The loaded model (:class:`~sciml.hamiltonian.artifact.HamiltonianPredictor`)."""
        if self._predictor is None:
            from sciml.hamiltonian.artifact import load_model

            self._predictor = load_model(self.path)
        return self._predictor

    def __call__(self, numbers, positions, zeroth: dict | None = None) -> np.ndarray | None:
        """Starting density of one molecule (``numbers`` (n,), ``positions`` (n, 3) Å); None outside the model.

        ``zeroth`` (optional): the molecule's ``{"H0", "S"}`` (pyscf order, Hartree) already built by the caller,
        with how (``xc``, ``grid_level``, ``h0``); used when that is how the model builds H0, else H0 is built here.
        """
        from sciml.hamiltonian.predict import molecule_structure, predict_structures
        from sciml.hamiltonian.scf.molecule import zeroth_step
        from sciml.hamiltonian.scf.refine import CACHE_MB, density_matrix, refine

        p = self.predictor
        if set(int(z) for z in numbers) - set(p.layout.elements()):
            return None
        recipe = (p.xc.lower(), MODEL_GRID_LEVEL, p.h0)
        given = zeroth is not None and (zeroth["xc"].lower(), zeroth["grid_level"], zeroth["h0"]) == recipe
        step = zeroth_step(numbers, positions, p.basis, p.xc, p.layout, "seed", MODEL_GRID_LEVEL, h0=p.h0,
                           cache_mb=CACHE_MB if self.refine else 0.0,
                           built={"H0": zeroth["H0"], "S": zeroth["S"]} if given else None)
        structure = molecule_structure(numbers, np.asarray(positions, dtype=np.float64), step, p.layout, "seed")
        h = p.layout.to_pyscf(predict_structures([structure], p, alpha=None)[0].hamiltonian, numbers)
        if self.refine:
            h = refine(h, step.fock, step.overlap, step.n_occupied, self.refine).hamiltonian
            step.fock.release()
        return density_matrix(h, step.overlap, step.n_occupied)
