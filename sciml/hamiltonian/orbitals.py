"""Atomic-orbital layout: which shells each element carries, and the pyscf <-> e3nn change of basis.

pyscf's real spherical GTOs use the real harmonics without Condon-Shortley phase, ordered m = -l..l, except p
shells, which are (x, y, z). e3nn 0.6 spans the same spaces with a different orthonormal basis (for l = 1 it is
(x, y, z) too; for l >= 2 it differs by a general orthogonal matrix, not a permutation). Per shell,
``pyscf_components(x) = Y_e3nn(x) @ T_l`` with ``T_l`` orthogonal, fitted once by least squares on fixed unit-sphere
points (so it follows whatever e3nn's convention is), and for a whole matrix

    M_e3nn = U M_pyscf U^T,   U = blockdiag(T_l over atoms and shells)   (U orthogonal).

Checked by the rotation rule H_ij(Qr) = D_i(Q) H_ij(r) D_j(Q)^T on pyscf integrals and Fock matrices
(``tests/unit/test_hamiltonian_orbitals.py``). The conversion happens once, at the I/O boundary (docs/design.md §3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sciml.hamiltonian.harmonics import pyscf_to_e3nn_shell, wigner_D

__all__ = ["OrbitalLayout", "atomic_numbers", "block_wigner", "wigner_D"]

_L_LETTERS = "spdfghi"


@dataclass(frozen=True)
class OrbitalLayout:
    """Shells per element: ``{Z: (l_1, l_2, ...)}`` in basis-set order (e.g. def2-SVP O: 0,0,0,1,1,2).

    Examples
    --------
    >>> OrbitalLayout({8: (0, 0, 0, 1, 1, 2), 1: (0, 0, 1)}).n_orbitals(8)
    14

    """

    shells: dict[int, tuple[int, ...]]

    def n_orbitals(self, z: int) -> int:
        """Number of atomic orbitals of element ``z``."""
        return sum(2 * l + 1 for l in self.shells_of(z))

    def irreps(self, z: int) -> str:
        """e3nn irreps string of one atom's orbitals, e.g. ``"1x0e+1x0e+1x1o"``; parity (-1)^l."""
        return "+".join(f"1x{l}{'e' if l % 2 == 0 else 'o'}" for l in self.shells_of(z))

    def elements(self) -> list[int]:
        """Atomic numbers covered by the basis, sorted."""
        return sorted(self.shells)

    def atom_offsets(self, numbers) -> np.ndarray:
        """Start of each atom's block in the full matrix, shape (n_atoms + 1,) (last entry = n_ao)."""
        sizes = [self.n_orbitals(int(z)) for z in numbers]
        return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    def atom_transform(self, z: int) -> np.ndarray:
        """Orthogonal (n_orb, n_orb) float64 ``U_z`` with ``B_e3nn = U_zi B_pyscf U_zj^T`` for a block (i, j)."""
        mats = [pyscf_to_e3nn_shell(l) for l in self.shells_of(int(z))]
        return _block_diag(mats)

    def transform(self, numbers) -> np.ndarray:
        """Orthogonal (n_ao, n_ao) float64 ``U`` of a whole structure: ``M_e3nn = U M_pyscf U^T``."""
        return _block_diag([self.atom_transform(int(z)) for z in numbers])

    def to_e3nn(self, matrix, numbers):
        """Convert (..., n_ao, n_ao) matrices (numpy or torch) from pyscf AO order/basis to e3nn's."""
        return _sandwich(self.transform(numbers), matrix, numbers, self)

    def to_pyscf(self, matrix, numbers):
        """Inverse of :meth:`to_e3nn`: ``M_pyscf = U^T M_e3nn U``."""
        return _sandwich(self.transform(numbers).T, matrix, numbers, self)

    def to_dict(self) -> dict:
        """JSON-friendly ``{"8": [0, 0, 0, 1, 1, 2], ...}``."""
        return {str(z): list(ls) for z, ls in sorted(self.shells.items())}

    @classmethod
    def from_dict(cls, data: dict) -> OrbitalLayout:
        """Inverse of :meth:`to_dict`."""
        return cls({int(z): tuple(int(l) for l in ls) for z, ls in data.items()})

    @classmethod
    def from_pyscf_mol(cls, mol) -> OrbitalLayout:
        """Shells per element of a ``pyscf.gto.Mole`` or ``pyscf.pbc.gto.Cell`` (nuclear Z, also with ECPs)."""
        return cls.from_ao_labels(atomic_numbers(mol), mol.ao_labels())

    @classmethod
    def from_ao_labels(cls, numbers, ao_labels) -> OrbitalLayout:
        """Parse pyscf ``mol.ao_labels()`` strings such as ``"0 O 2px"`` into shells per element.

        Raises
        ------
        ValueError
            If the labels do not match ``numbers`` or two atoms of one element carry different shells.

        """
        per_atom: dict[int, list[int]] = {}
        labels = [str(s).split() for s in ao_labels]
        i = 0
        while i < len(labels):
            if len(labels[i]) < 3:
                raise ValueError(f"cannot parse AO label {' '.join(labels[i])!r}; expected e.g. '0 O 2px'")
            atom, name = int(labels[i][0]), labels[i][2]
            l = _L_LETTERS.index(name.lstrip("0123456789")[0])
            per_atom.setdefault(atom, []).append(l)
            i += 2 * l + 1
        if i != len(labels) or sorted(per_atom) != list(range(len(numbers))):
            raise ValueError(f"ao_labels describe atoms {sorted(per_atom)}, expected 0..{len(numbers) - 1}")
        shells: dict[int, tuple[int, ...]] = {}
        for atom, ls in per_atom.items():
            z = int(numbers[atom])
            if shells.setdefault(z, tuple(ls)) != tuple(ls):
                raise ValueError(f"element Z={z} has different basis shells on different atoms")
        return cls(shells)

    def shells_of(self, z: int) -> tuple[int, ...]:
        """Angular momenta of element ``z``'s shells; ValueError for an element outside the basis."""
        if int(z) not in self.shells:
            raise ValueError(f"element Z={int(z)} is not in the orbital basis (known: {sorted(self.shells)}); "
                             "use a model/dataset that covers this element")
        return self.shells[int(z)]


def block_wigner(layout: OrbitalLayout, numbers, rotation):
    """Block-diagonal Wigner D of a whole structure in e3nn order, torch float64 (n_ao, n_ao).

    ``M(Qr) = D M(r) D^T`` for any AO matrix M (H, H0, S) in e3nn order; ``rotation`` is a 3x3 orthogonal Q
    (improper ones allowed: the parity (-1)^l comes out of the fit).
    """
    import torch

    per_l = {}
    blocks = []
    for z in numbers:
        for l in layout.shells_of(int(z)):
            if l not in per_l:
                per_l[l] = wigner_D(l, rotation)
            blocks.append(per_l[l])
    return torch.block_diag(*blocks)


def atomic_numbers(mol) -> np.ndarray:
    """Nuclear charges Z of a pyscf molecule or cell (not the valence charges left by pseudopotentials)."""
    from pyscf import gto

    return np.asarray([gto.charge(mol.atom_pure_symbol(a)) for a in range(mol.natm)], dtype=np.int64)


def _block_diag(mats: list[np.ndarray]) -> np.ndarray:
    n = sum(m.shape[0] for m in mats)
    out = np.zeros((n, n))
    start = 0
    for m in mats:
        k = m.shape[0]
        out[start:start + k, start:start + k] = m
        start += k
    return out


def _sandwich(u: np.ndarray, matrix, numbers, layout: OrbitalLayout):
    """``u @ matrix @ u.T`` over the last two axes, keeping numpy/torch type, dtype and device."""
    n = u.shape[0]
    if tuple(matrix.shape[-2:]) != (n, n):
        raise ValueError(f"matrix has shape {tuple(matrix.shape)}, but atoms {list(map(int, numbers))} carry "
                         f"{n} orbitals in this basis; the basis set differs from the layout's")
    if isinstance(matrix, np.ndarray):
        return u.astype(np.result_type(matrix.dtype, np.float32), copy=False) @ matrix @ u.T
    import torch

    ut = torch.as_tensor(u, dtype=matrix.dtype if matrix.is_floating_point() or matrix.is_complex()
                         else torch.float64, device=matrix.device)
    return ut @ matrix @ ut.transpose(-1, -2)
