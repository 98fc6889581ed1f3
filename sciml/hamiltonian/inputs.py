"""Read molecules for prediction and check them against a model before any pyscf work.

Every error is one line that names the file: unreadable ``.xyz``, elements outside the model's orbital basis (with
the shipped models that cover them), open-shell molecules (:func:`sciml.hamiltonian.scf.molecule.check_closed_shell`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from sciml.hamiltonian.orbitals import OrbitalLayout

__all__ = ["check_elements", "covering_models", "read_frames", "read_xyz"]


def read_frames(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Atomic numbers ``(n,)`` and positions ``(n_frames, n, 3)`` in Å of a (multi-frame) ``.xyz`` file.

    Parsed by :func:`sciml.hamiltonian.data.gen_molecules.read_xyz_frames` (ase; its one-line errors for
    unreadable files, unknown elements, NaN or duplicated atoms, frames with other atoms).
    """
    from sciml.hamiltonian.data.gen_molecules import read_xyz_frames

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    return read_xyz_frames(path)


def read_xyz(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Atomic numbers ``(n,)`` and positions ``(n, 3)`` in Å of a single-frame ``.xyz`` file."""
    numbers, frames = read_frames(path)
    if len(frames) != 1:
        raise ValueError(f"{path}: holds {len(frames)} frames; expected one molecule")
    return numbers, frames[0]


def covering_models(elements, periodic: bool = False) -> list[str]:
    """Names of the shipped Hamiltonian models (molecule or ``periodic``) trained on every element of ``elements``.

    Read from each model's ``metadata.json`` (``task``, ``periodic``, ``elements``); models whose file is unreadable or
    lists no elements are skipped.
    """
    from sciml.core.io.shipped import shipped_models

    wanted, names = {int(z) for z in elements}, []
    for name, folder in shipped_models().items():
        try:
            meta = json.loads((folder / "metadata.json").read_text())
        except (OSError, ValueError):
            continue
        crystal = bool(meta.get("periodic")) or meta.get("task") == "hamiltonian-crystal"
        if (meta.get("task") in ("hamiltonian", "hamiltonian-crystal") and crystal == periodic
                and wanted <= {int(z) for z in meta.get("elements") or []}):
            names.append(name)
    return names


def check_elements(numbers, layout: OrbitalLayout, source: str, periodic: bool = False,
                   known: Iterable[int] | None = None) -> None:
    """Raise a one-line ValueError naming ``source``, the elements the model was not trained on and a model that was.

    ``periodic``: the input is a crystal (the suggested shipped models are crystal models). ``known``: the elements
    of the training molecules (``training_domain`` in ``metadata.json``) when recorded; the layout's otherwise.
    """
    from ase.data import chemical_symbols

    trained = set(layout.elements()) if known is None else set(layout.elements()) & {int(z) for z in known}
    unknown = sorted({int(z) for z in numbers} - trained)
    if not unknown:
        return
    names = ", ".join(chemical_symbols[z] for z in unknown)
    have = ", ".join(chemical_symbols[z] for z in sorted(trained))
    models = covering_models(numbers, periodic)
    fix = (f"use a model trained on them: --model {' or --model '.join(models)}" if models else
           "no shipped model covers them; train one on these elements (docs/hamiltonian.md)")
    raise ValueError(f"{source}: element(s) {names} are outside the trained orbital basis ({have}); {fix}")
