"""Hamiltonian data module: structures → graphs with H0/H block irreps, seeded splits, batching (docs/design.md §3).

A molecule becomes one graph sample (:func:`sciml.hamiltonian.data.sample.structure_to_sample`: H0/H block irreps
on atoms and atom pairs, dense matrices for the eigenvalue loss); crystals become periodic graphs.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from torch.utils.data import DataLoader

from sciml.core.datamodule import SplitDataModule
from sciml.core.splits import group_split, random_split, write_split
from sciml.hamiltonian.data.batch import HamiltonianBatch, collate, collate_crystals
from sciml.hamiltonian.data.sample import bases, lowdin, orbital_energies, structure_to_sample

if TYPE_CHECKING:
    from sciml.hamiltonian.structure import HamiltonianStructure

__all__ = ["HamiltonianBatch", "HamiltonianDataModule", "bases", "collate", "collate_crystals", "lowdin",
           "orbital_energies", "structure_to_sample"]

log = logging.getLogger(__name__)


class HamiltonianDataModule(SplitDataModule):
    """Read molecules (an npz of conformers) or crystals (a folder of periodic DeepH folders), featurise, split.

    Parameters
    ----------
    path : str
        npz file in the shared format (``../shared/data/hamiltonian/*.npz``: molecules), a folder of such files
        (one molecule each: a many-molecule set), or a folder holding periodic DeepH folders (``sciml data
        hamiltonian --crystal``: crystals, see :mod:`sciml.hamiltonian.data.crystal`).
    split : dict
        ``fractions`` (train, val, calib, test), ``seed`` and ``by`` (``"conformer"``, or ``"molecule"``: every
        conformer of a molecule in one split, :func:`~sciml.core.splits.group_split`); written to
        ``<run_dir>/split.json``.
    batch_size, num_workers : int
        Loader settings (structures per batch).
    cutoff : float
        Molecules: pairs within it (Å) are edges, the others keep H0. Crystals: blocks within it are network
        edges, the closed-form ridge alone predicts the others.
    n_virtual : int
        Virtual orbitals (bands) included in the orbital-energy (band-energy) target and loss.
    limit : int or None
        Use only the first ``limit`` structures (tests).
    run_dir : str or None
        Where ``split.json`` goes.

    """

    def __init__(self, path: str, split: dict | None = None, batch_size: int = 32, num_workers: int = 0,
                 cutoff: float = 100.0, n_virtual: int = 3, limit: int | None = None,
                 run_dir: str | None = None) -> None:
        super().__init__()
        split = split or {}
        self.path, self.batch_size, self.num_workers = path, batch_size, num_workers
        self.cutoff, self.n_virtual, self.limit, self.run_dir = cutoff, n_virtual, limit, run_dir
        self.fractions, self.seed = split.get("fractions", [0.7, 0.05, 0.1, 0.15]), int(split.get("seed", 0))
        self.split_by = str(split.get("by", "conformer"))
        self.folder = Path(path).is_dir() and any(Path(path).glob("*.npz"))  # one npz per molecule
        self.periodic = Path(path).is_dir() and not self.folder
        self.datasets: dict[str, list[dict]] = {}

    def read(self) -> list[HamiltonianStructure]:
        """The structures of ``path`` (first ``limit``); sets ``layout`` and ``meta`` (level of theory)."""
        if not Path(self.path).exists():
            raise FileNotFoundError(f"data.path {self.path}: no such file or folder (molecules: an npz from "
                                    "`sciml data hamiltonian --molecule`; crystals: a folder from `--crystal`)")
        if self.periodic:
            from sciml.hamiltonian.data.crystal import read_crystals

            structures, self.layout = read_crystals(self.path)
        elif self.folder:
            from sciml.hamiltonian.data.npz import read_npz_folder

            structures, self.layout = read_npz_folder(self.path)
        else:
            from sciml.hamiltonian.data.npz import read_npz

            structures, self.layout = read_npz(self.path)
        if self.split_by == "molecule" and not self.folder:
            raise ValueError(f"data.split.by is 'molecule' but data.path {self.path} is not a folder of npz files "
                             "(one per molecule); use by: conformer or point data.path at such a folder")
        structures = structures[: self.limit] if self.limit else structures
        self.meta = {k: structures[0].meta.get(k) for k in ("basis", "xc")}
        if not self.periodic:
            self.meta["h0"] = str(structures[0].meta.get("h0", "full"))
        else:
            from sciml.hamiltonian.data.gen_crystal import generator_settings

            self.meta |= {"periodic": True, "generator": generator_settings(structures)}
        return structures

    def sample(self, s: HamiltonianStructure, with_target: bool = True) -> dict:
        """One featurised structure (molecule or crystal)."""
        if self.periodic:
            from sciml.hamiltonian.data.crystal import crystal_sample

            return crystal_sample(s, self.layout, self.node_basis, self.edge_basis, self.cutoff, self.n_virtual,
                                  with_target)
        return structure_to_sample(s, self.layout, self.node_basis, self.edge_basis, self.cutoff, self.n_virtual,
                                   with_target)

    def setup(self, stage: str | None = None) -> None:
        """Read, featurise and split the data (once)."""
        if self.datasets:
            return
        structures = self.read()
        self.node_basis, self.edge_basis = bases(self.layout)
        samples = [self.sample(s) for s in structures]
        if self.split_by == "molecule":
            split = group_split([s.meta["molecule"] for s in structures], self.fractions, self.seed)
        else:
            split = random_split(len(samples), self.fractions, self.seed)
        self.split = {k: v.tolist() for k, v in split.items()}
        self.datasets = {name: [samples[i] for i in idx] for name, idx in split.items()}
        self.structures = {name: [structures[i] for i in idx] for name, idx in split.items()}
        if self.run_dir:
            ids = ([str(s.meta.get("source", k)) for k, s in enumerate(structures)] if self.periodic else
                   [f"{Path(s.meta.get('source', self.path)).name}:{s.meta.get('index', k)}"
                    for k, s in enumerate(structures)])
            write_split(Path(self.run_dir) / "split.json", ids, split, self.seed)
        log.info("split sizes: %s", self.split_sizes())

    @property
    def collate_fn(self):
        return collate_crystals if self.periodic else collate

    def loader(self, name: str, shuffle: bool = False) -> DataLoader:
        return DataLoader(self.datasets[name], batch_size=self.batch_size, shuffle=shuffle, collate_fn=self.collate_fn,
                          num_workers=self.num_workers)

    def split_sizes(self) -> dict[str, int]:
        return {k: len(v) for k, v in self.datasets.items()}
