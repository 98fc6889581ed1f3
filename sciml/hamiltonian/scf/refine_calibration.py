"""Conformal intervals for refined predictions (``predict --refine K``), fitted on calibration molecules.

The artifact's own calibrator describes the network's errors (hundreds of meV on new molecules); after ``K``
self-consistent Fock builds (:mod:`sciml.hamiltonian.scf.refine`) the errors are tens of meV or less, so those widths
say nothing about them. :func:`add_refine_calibration` refines the model's predictions of held-out calibration
molecules with the same ``K`` and fits a Mondrian-by-orbital split-conformal calibrator (Vovk 2012; groups HOMO −1,
LUMO 0, ...; the deepest pooled until each can give a finite width, :func:`sciml.hamiltonian.domain.pool_deep_groups`)
on the normalised errors

    s = |ε_K − ε_ref| / (|ε_K − ε_{K−1}| + m),

with ``ε_K − ε_{K−1}`` the orbital's change in the last build (an iteration that has not converged yet is still
moving) and ``m`` the median of that change over the calibration orbitals (so that a converged orbital keeps a
width of the typical size). The interval is ``ε_K ± q_g (|ε_K − ε_{K−1}| + m)``. The core orbitals (the lowest
``Σ chemcore(Z)`` of each molecule, 1s of C/N/O) form one group of their own (``CORE_GROUP``): counted from the
HOMO they would share a group with valence orbitals of larger molecules, and their refined errors are 2–3 times
larger (calibration molecules: median 4.8 against 2.0 meV). It is stored as
``refine_calibrator.json`` and used by ``predict --refine K`` with the same ``K``; the intervals then hold for
molecules drawn like the calibration molecules, as the unrefined ones do. The score was chosen over the plain
absolute one, and the core group added, by leave-one-molecule-out on the 24 calibration molecules of the organic model
(``docs/hamiltonian.md``). A file without ``floor`` (fitted before) holds the absolute score; one without ``core``
groups core orbitals from the HOMO like the others.

Only molecules the model was not trained on may calibrate it: the files' molecules must be among the artifact's
calibration molecules (``residual.json`` lists them).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

REFINE_FILE = "refine_calibrator.json"
CORE_GROUP = 1000  # Mondrian group of core orbitals; above every HOMO-relative group, so never pooled with deep ones


def core_orbitals(numbers) -> int:
    """Number of core orbitals of a molecule: ``Σ chemcore(Z)`` (pyscf's frozen-core count; 1 for B–Ne)."""
    from pyscf.data.elements import chemcore_atm

    return int(sum(chemcore_atm[int(z)] for z in numbers))


def refined_groups(n_eig: int, n_occ: int, n_core: int, known: torch.Tensor | None = None) -> torch.Tensor:
    """``(n_eig,)`` Mondrian groups of one molecule's refined orbitals, the lowest ``n_core`` in ``CORE_GROUP``.

    The others as :func:`~sciml.hamiltonian.domain.orbital_groups` (HOMO −1, LUMO 0); ``known``: the calibrated
    groups (clamping as there).
    """
    from sciml.hamiltonian.domain import orbital_groups

    valence = None if known is None else known[known != CORE_GROUP]
    groups = orbital_groups(torch.tensor([n_eig]), torch.tensor([n_occ]), valence)
    groups[:min(n_core, n_occ)] = CORE_GROUP
    return groups


@dataclass
class RefinedCalibration:
    """A per-orbital calibrator of predictions refined by ``steps`` Fock builds.

    Attributes
    ----------
    steps : the ``K`` of ``predict --refine K`` it was fitted for.
    calibrator : :class:`sciml.uq.mondrian.MondrianConformal` on the normalised score (module docstring), or on
        the absolute one (Hartree) when ``floor`` is None.
    molecules : the calibration molecules.
    floor : ``m``, Hartree: the median last-build change of the calibration orbitals.
    core : whether core orbitals have their own group (``CORE_GROUP``); False in files fitted before.

    """

    steps: int
    calibrator: torch.nn.Module
    molecules: list[str] = field(default_factory=list)
    floor: float | None = None
    core: bool = False

    def to_dict(self) -> dict:
        return {"steps": self.steps, "calibrator": self.calibrator.to_dict(), "molecules": self.molecules,
                "floor": self.floor, "core": self.core}

    @classmethod
    def from_dict(cls, data: dict) -> RefinedCalibration:
        from sciml.uq.split import calibrator_from_dict

        steps = int(data["steps"])
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        floor = data.get("floor")
        if floor is not None and not (math.isfinite(floor) and floor > 0):
            raise ValueError(f"floor must be a finite number > 0 (Hartree), got {floor}")
        return cls(steps, calibrator_from_dict(data["calibrator"]), [str(m) for m in data.get("molecules", [])],
                   None if floor is None else float(floor), bool(data.get("core", False)))

    def scale(self, change: np.ndarray) -> np.ndarray:
        """``|ε_K − ε_{K−1}| + m`` (Hartree) of the last-build changes ``change`` (ones for the absolute score)."""
        return np.ones_like(change) if self.floor is None else np.abs(change) + self.floor

    def intervals(self, eps: np.ndarray, change: np.ndarray, n_occupied: int, alpha: float,
                  n_core: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper ends (Hartree, ``(k,)``) around refined orbital energies ``eps`` of one molecule.

        ``change``: ``ε_K − ε_{K−1}`` (Hartree, ``(k,)``), each orbital's change in the last Fock build.
        ``n_core``: its core orbitals (:func:`core_orbitals`), used when the calibrator has a core group.
        """
        cal = self.calibrator
        groups = refined_groups(len(eps), n_occupied, n_core if self.core else 0, cal.group_ids)
        half = cal.threshold_or_inf(groups, alpha).double().numpy() * self.scale(change)
        return eps - half, eps + half


def refined_errors(structures, predictor, steps: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Absolute errors, last-build changes (both Hartree) and groups of the refined orbital energies of ``structures``.

    Each structure needs its reference ``H`` and ``S`` (a data set file); H0 is rebuilt the model's way with the
    refinement's Fock builds, the network predicts, :func:`sciml.hamiltonian.predict.refine_result` refines.
    """
    from scipy.linalg import eigh

    from sciml.hamiltonian.predict import predict_structures, refine_result, zeroth_step
    from sciml.hamiltonian.scf.refine import CACHE_MB

    layout, scores, changes, groups = predictor.layout, [], [], []
    for s in structures:
        mats = zeroth_step(s.numbers, s.positions, predictor.basis, predictor.xc, layout, h0=predictor.h0,
                           cache_mb=CACHE_MB)
        result = predict_structures([s], predictor, alpha=None)[0]
        refined = refine_result(s, result, mats["S"], mats["solver"], predictor, steps, alpha=None)
        eps = np.asarray(refined["orbital_energies"])
        ref = eigh(s.to_dense("H", layout, order="pyscf"), mats["S"], eigvals_only=True)[:len(eps)]
        scores.append(torch.from_numpy(np.abs(eps - ref)))
        changes.append(torch.tensor(refined["refine_last_change_hartree"], dtype=torch.float64))
        groups.append(refined_groups(len(eps), result["n_occupied"], core_orbitals(s.numbers)))
    return torch.cat(scores), torch.cat(changes), torch.cat(groups)


def add_refine_calibration(path: str | Path, data: str | Path, steps: int = 5, alpha: float = 0.1) -> dict:
    """Fit and add ``refine_calibrator.json`` to a molecule artifact (weights unchanged; module docstring).

    ``data``: a folder of data set files (``sciml data hamiltonian``, one npz per molecule) of the artifact's
    calibration molecules. Returns a summary (molecules, conformers, median width in meV, seconds).
    """
    from sciml.core.io.artifact import add_extra_files, with_card_section
    from sciml.hamiltonian.artifact import load_model
    from sciml.hamiltonian.data.npz import read_npz
    from sciml.hamiltonian.domain import pool_deep_groups
    from sciml.hamiltonian.units import HARTREE_EV
    from sciml.uq.mondrian import MondrianConformal

    start = time.perf_counter()
    predictor = load_model(path)
    if predictor.periodic or predictor.residual is None or not predictor.residual.molecules:
        raise ValueError(f"{path}: needs a molecule model whose residual.json names its calibration molecules "
                         "(sciml.hamiltonian.export.add_residual_bound)")
    files = sorted(Path(data).glob("*.npz"))
    if not files:
        raise ValueError(f"{data}: no .npz files; make the calibration molecules with `sciml data hamiltonian`")
    outside = [f.stem for f in files if f.stem not in predictor.residual.molecules]
    if outside:
        raise ValueError(f"{data}: {', '.join(outside)} are not calibration molecules of {path} (those are "
                         f"{', '.join(predictor.residual.molecules)}); calibrate on them only")
    structures = [s for f in files for s in read_npz(f)[0]]
    errors, changes, groups = refined_errors(structures, predictor, steps)
    groups = pool_deep_groups(groups, math.ceil(1 / alpha - 1e-9) - 1)
    floor = float(changes.abs().median())
    if not floor > 0:
        raise ValueError(f"{data}: the calibration orbitals did not change in the last of {steps} builds; "
                         "use fewer builds")
    sigma = changes.abs() + floor
    cal = MondrianConformal(score="normalized", alpha=alpha).fit(errors / sigma, groups)
    fitted = RefinedCalibration(steps, cal, [f.stem for f in files], floor, core=True)
    width = cal.threshold_or_inf(groups, alpha).double() * sigma
    summary = {"steps": steps, "alpha": alpha, "n_molecules": len(files), "n_structures": len(structures),
               "median_half_width_mev": float(width.median()) * HARTREE_EV * 1e3,
               "floor_mev": floor * HARTREE_EV * 1e3,
               "seconds": round(time.perf_counter() - start, 1)}
    card = with_card_section((Path(path) / "README.md").read_text(), "Intervals of refined predictions", (
        f"- `sciml hamiltonian predict --refine {steps}` refines each "
        f"prediction by {steps} self-consistent Fock builds; its orbital-energy intervals come from "
        f"`{REFINE_FILE}`, Mondrian by orbital (core orbitals one group) on "
        f"|ε − ε_ref| / (|ε_K − ε_(K−1)| + {floor * HARTREE_EV * 1e3:.2f} meV) of "
        f"{len(structures)} refined conformers of {len(files)} calibration molecules (median half-width "
        f"{summary['median_half_width_mev']:.1f} meV at α = {alpha}), fitted by "
        "`sciml.hamiltonian.scf.refine_calibration.add_refine_calibration`. Other K: the "
        "unrefined widths, marked without guarantee."))
    add_extra_files(path, {REFINE_FILE: fitted.to_dict()}, metadata={"refine_calibration": summary}, card=card)
    return summary
