"""Cheap SCF settings of the data engine: allowed only where their measured H error is within 10 µHa.

The reference settings are exact Coulomb/exchange and XC grid level 3. Density fitting (``density_fit``), a coarser
XC grid (``grid_level`` < 3) and their combinations are cheaper; each was measured against the reference on QM9
molecules by ``benchmarks/hamiltonian_cheap_settings.py`` (``benchmarks/results/hamiltonian_cheap_settings.json``).
A combination passes when its worst molecule's H MAE (over all ``n_ao²`` elements) is ≤ :data:`LIMIT_UHA`;
:func:`check_cheap` refuses any other one (and any cheap setting at a functional or basis never measured).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LIMIT_UHA", "MEASURED", "CheapMeasurement", "check_cheap", "is_reference"]

#: the largest H MAE (µHa, worst measured molecule) a cheap setting may have against the reference settings
LIMIT_UHA = 10.0
#: XC grid level of the reference settings
REFERENCE_GRID = 3


@dataclass(frozen=True)
class CheapMeasurement:
    """One cheap combination measured against the reference settings (worst of the measured molecules).

    ``h_mae_uha`` and ``h_max_abs_uha``: H error in µHa (mean and largest absolute element);
    ``occupied_max_uha``: largest error of an occupied orbital energy, µHa; ``time_ratio``: SCF seconds over
    the reference's (summed over the molecules, one thread).
    """

    density_fit: bool
    grid_level: int
    final_build: bool
    h_mae_uha: float
    h_max_abs_uha: float
    occupied_max_uha: float
    time_ratio: float

    @property
    def passes(self) -> bool:
        """Whether the worst measured H MAE is within :data:`LIMIT_UHA`."""
        return self.h_mae_uha <= LIMIT_UHA

    def describe(self) -> str:
        """The command-line flags of this combination, e.g. ``--density-fit --grid-level 1``."""
        flags = (["--density-fit"] if self.density_fit else []) + (
            [f"--grid-level {self.grid_level}"] if self.grid_level != REFERENCE_GRID else [])
        return " ".join(flags + (["--final-build"] if self.final_build else []))


#: (xc, basis) -> the measured combinations: ``benchmarks/results/hamiltonian_cheap_settings.json`` (6 QM9 molecules
#: of 4–6 heavy atoms, one with fluorine, 10–15 atoms; density fitting with pyscf's default JK-fit basis)
MEASURED: dict[tuple[str, str], tuple[CheapMeasurement, ...]] = {
    ("pbe", "def2-svp"): (
        CheapMeasurement(True, 3, False, 8.72, 226.4, 154.3, 0.78),
        CheapMeasurement(False, 2, False, 0.05, 5.0, 0.9, 0.66),
        CheapMeasurement(False, 1, False, 1.64, 102.9, 33.2, 0.39),
        CheapMeasurement(True, 2, False, 8.73, 226.4, 154.5, 0.74),
        CheapMeasurement(True, 1, False, 8.93, 230.9, 187.1, 0.42),
        CheapMeasurement(True, 1, True, 1.35, 80.4, 80.1, 0.52),
    ),
}


def is_reference(settings) -> bool:
    """True when ``settings`` (:class:`~sciml.hamiltonian.data.generate.SCFSettings`) are the reference or finer.

    Reference or finer: no density fitting and XC grid level ≥ 3.
    """
    return not settings.density_fit and settings.grid_level >= REFERENCE_GRID


def check_cheap(settings) -> CheapMeasurement | None:
    """The measurement that allows ``settings``; None for the reference settings; one-line ValueError otherwise."""
    if is_reference(settings):
        return None
    final = bool(settings.final_build)
    level = (settings.xc.lower(), settings.basis.lower())
    measured = MEASURED.get(level, ())
    passing = ", ".join(f"'{m.describe()}'" for m in measured if m.passes) or "none"
    for m in measured:
        if (m.density_fit, m.grid_level, m.final_build) == (settings.density_fit, settings.grid_level, final):
            if m.passes:
                return m
            raise ValueError(f"'{m.describe()}' moves H by {m.h_mae_uha:.1f} µHa (MAE, worst measured molecule) "
                             f"at {level[0]}/{level[1]}, more than {LIMIT_UHA:g} µHa; cheap settings allowed: "
                             f"{passing}")
    flags = CheapMeasurement(settings.density_fit, settings.grid_level, final, 0, 0, 0, 0).describe()
    raise ValueError(f"'{flags}' at {level[0]}/{level[1]} has no measured H error against the reference settings "
                     f"(benchmarks/hamiltonian_cheap_settings.py); cheap settings allowed there: {passing}")
