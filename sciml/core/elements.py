"""Element symbols (H..Lr) and the element descriptor table (CGCNN-style atom features) computed once from pymatgen."""

from __future__ import annotations

import warnings
from functools import lru_cache

import numpy as np

MAX_Z = 103
PROPERTIES = ("Z", "X", "row", "group", "atomic_radius", "atomic_mass", "mendeleev_no", "ionization_energy",
              "electron_affinity", "average_ionic_radius", "molar_volume")
BLOCKS = ("s", "p", "d", "f")
#: element symbol by atomic number, ``SYMBOLS[z]`` for z = 1..MAX_Z (index 0 is empty); no pymatgen import needed
SYMBOLS = ("", *"""H He Li Be B C N O F Ne Na Mg Al Si P S Cl Ar K Ca Sc Ti V Cr Mn Fe Co Ni Cu Zn Ga Ge As Se Br Kr
    Rb Sr Y Zr Nb Mo Tc Ru Rh Pd Ag Cd In Sn Sb Te I Xe Cs Ba La Ce Pr Nd Pm Sm Eu Gd Tb Dy Ho Er Tm Yb Lu Hf Ta W
    Re Os Ir Pt Au Hg Tl Pb Bi Po At Rn Fr Ra Ac Th Pa U Np Pu Am Cm Bk Cf Es Fm Md No Lr""".split())


def _value(element, name: str) -> float:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = getattr(element, name)
        return float(value) if value is not None else np.nan
    except (ValueError, TypeError, AttributeError, KeyError):
        return np.nan


@lru_cache(maxsize=1)
def element_table() -> np.ndarray:
    """Standardised element descriptors, shape ``(MAX_Z + 1, len(PROPERTIES) + 4)``; row 0 is padding.

    Columns: the pymatgen properties in :data:`PROPERTIES` (z-scored over H..Lr, missing values set to the
    mean, i.e. 0) followed by a one-hot of the s/p/d/f block.
    """
    from pymatgen.core import Element

    raw = np.full((MAX_Z + 1, len(PROPERTIES)), np.nan)
    block = np.zeros((MAX_Z + 1, len(BLOCKS)))
    for z in range(1, MAX_Z + 1):
        el = Element.from_Z(z)
        raw[z] = [_value(el, name) for name in PROPERTIES]
        if el.block in BLOCKS:
            block[z, BLOCKS.index(el.block)] = 1.0
    mean, std = np.nanmean(raw[1:], axis=0), np.nanstd(raw[1:], axis=0) + 1e-12
    table = np.nan_to_num((raw - mean) / std, nan=0.0)
    table[0] = 0.0
    return np.concatenate([table, block], axis=1)
