"""Periodic Hamiltonians: real-space blocks H(R) <-> Bloch matrices H(k), and band energies.

Convention (DeepH's, also pyscf's Bloch sums): with k in fractional (reduced) coordinates and R an integer
lattice translation,

    H(k) = sum_R exp(2 pi i k.R) H(R),        H(R) = (1/N_k) sum_{k in mesh} exp(-2 pi i k.R) H(k),

where H(R)_{mu nu} = <mu, cell 0 | H | nu, cell R>. The inverse transform from an N1 x N2 x N3 mesh only knows
H(R) up to translations by the supercell (aliasing); :func:`fourier_blocks` assigns each class to its
Wigner-Seitz representative (the image with the shortest atom-atom distance; ties split equally), which keeps the
round trip exact on the mesh. Band energies solve the generalised problem H(k) C = S(k) C eps.
"""

from __future__ import annotations

import itertools

import numpy as np

from sciml.hamiltonian.orbitals import OrbitalLayout
from sciml.hamiltonian.structure import HamiltonianStructure
from sciml.hamiltonian.units import HARTREE_MEV

__all__ = ["band_energies", "band_energies_torch", "bloch_sum", "bloch_sum_torch", "crystal_errors", "dense_blocks",
           "fourier_blocks", "kpath", "mesh_kpoints", "structure_bands"]


def mesh_kpoints(mesh) -> np.ndarray:
    """Fractional k-points of a Gamma-centred Monkhorst-Pack mesh, (N1 N2 N3, 3), pyscf's ``make_kpts`` order."""
    axes = [np.arange(n) / n for n in mesh]
    return np.array(list(itertools.product(*axes)), dtype=np.float64)


def dense_blocks(structure: HamiltonianStructure, name: str, layout: OrbitalLayout):
    """Assemble atom blocks into one full matrix per lattice vector.

    Returns
    -------
    R : (n_R, 3) int64 lattice translations.
    HR : (n_R, n_ao, n_ao) float64, e3nn order, Hartree; HR[r] = <cell 0 | M | cell R[r]>.

    """
    off = layout.atom_offsets(structure.numbers)
    blocks = structure.blocks_of(name)
    rs = sorted({k[:3] for k in blocks})
    index = {r: n for n, r in enumerate(rs)}
    out = np.zeros((len(rs), off[-1], off[-1]))
    for (rx, ry, rz, i, j), b in blocks.items():
        out[index[(rx, ry, rz)], off[i]:off[i + 1], off[j]:off[j + 1]] = b
    return np.asarray(rs, dtype=np.int64).reshape(-1, 3), out


def bloch_sum(R: np.ndarray, HR: np.ndarray, kpts: np.ndarray) -> np.ndarray:
    """H(k) = sum_R exp(2 pi i k.R) H(R): (n_R, 3) int, (n_R, n, n), (n_k, 3) fractional -> (n_k, n, n) complex."""
    phase = np.exp(2j * np.pi * np.asarray(kpts, dtype=np.float64) @ np.asarray(R, dtype=np.float64).T)
    return np.einsum("kr,rab->kab", phase, HR)


def bloch_sum_torch(R, HR, kpts):
    """Differentiable :func:`bloch_sum` in torch (complex output; gradients flow into ``HR``)."""
    import torch

    R = torch.as_tensor(R, dtype=HR.dtype, device=HR.device)
    k = torch.as_tensor(kpts, dtype=HR.dtype, device=HR.device)
    angle = 2 * torch.pi * (k @ R.T)
    phase = torch.polar(torch.ones_like(angle), angle)
    return torch.einsum("kr,rab->kab", phase, HR.to(phase.dtype))


def band_energies(hk: np.ndarray, sk: np.ndarray) -> np.ndarray:
    """Eigenvalues of H(k) C = S(k) C eps per k, ascending: (n_k, n, n) x2 -> (n_k, n) real, Hartree."""
    from scipy.linalg import eigh

    return np.stack([eigh(h, s, eigvals_only=True) for h, s in zip(hk, sk, strict=True)])


def band_energies_torch(hk, sk):
    """Differentiable band energies via Löwdin orthogonalisation: eps = eigvalsh(S^-1/2 H S^-1/2).

    S^-1/2 from ``eigh(S)``; ``hk``, ``sk`` (n_k, n, n) Hermitian (complex or real) -> (n_k, n) real.
    """
    import torch

    w, v = torch.linalg.eigh(sk)
    inv_sqrt = (v * w.clamp_min(1e-12).rsqrt().unsqueeze(-2).to(v.dtype)) @ v.mH
    return torch.linalg.eigvalsh(inv_sqrt @ hk @ inv_sqrt)


def fourier_blocks(hk: np.ndarray, mesh, positions: np.ndarray, lattice: np.ndarray, offsets: np.ndarray,
                   cutoff: float | None = None, tie_tol: float = 1e-4) -> dict[tuple, np.ndarray]:
    """Inverse Fourier transform of H(k) on a Gamma-centred mesh into Wigner-Seitz atom-pair blocks.

    Parameters
    ----------
    hk : (N1 N2 N3, n_ao, n_ao) complex
        H(k) at :func:`mesh_kpoints` ``(mesh)``, any AO order whose atom blocks are given by ``offsets``.
    mesh : sequence of 3 ints
        The k-mesh N1, N2, N3.
    positions : (n_atoms, 3) float
        Cartesian positions, Å.
    lattice : (3, 3) float
        Lattice vectors as rows, Å.
    offsets : (n_atoms + 1,) int
        Atom block starts (``OrbitalLayout.atom_offsets``).
    cutoff : float, optional
        Keep only pairs with |r_j + R - r_i| <= cutoff Å (``None``: all Wigner-Seitz representatives; the
        round trip is then exact on the mesh).
    tie_tol : float
        Distances within this many Å count as equal; tied images share the class value equally.

    Returns
    -------
    ``{(Rx, Ry, Rz, i, j): (n_orb_i, n_orb_j) float64}`` (the imaginary part, zero up to SCF noise, is dropped).

    """
    mesh = np.asarray(mesh, dtype=np.int64)
    kfrac = mesh_kpoints(mesh)
    classes = np.array(list(itertools.product(*(range(n) for n in mesh))), dtype=np.int64)
    phase = np.exp(-2j * np.pi * classes @ kfrac.T) / len(kfrac)  # (n_class, n_k)
    hr = np.einsum("ck,kab->cab", phase, hk).real
    shifts = np.array(list(itertools.product((-1, 0, 1), repeat=3)), dtype=np.int64)
    out = {}
    n_atoms = len(positions)
    for c, r0 in enumerate(classes):
        images = r0 + shifts * mesh  # (27, 3) candidate representatives
        cart = images @ lattice
        for i, j in itertools.product(range(n_atoms), repeat=2):
            dist = np.linalg.norm(positions[j] + cart - positions[i], axis=1)
            ties = np.flatnonzero(dist <= dist.min() + tie_tol)
            if cutoff is not None and dist.min() > cutoff:
                continue
            block = hr[c, offsets[i]:offsets[i + 1], offsets[j]:offsets[j + 1]] / len(ties)
            for t in ties:
                out[(*(int(v) for v in images[t]), i, j)] = block
    return out


def structure_bands(structure: HamiltonianStructure, layout: OrbitalLayout, kpts, name: str = "H") -> np.ndarray:
    """Band energies (n_k, n_ao), Hartree, of matrix ``name`` with the structure's S at fractional ``kpts``."""
    r_h, h = dense_blocks(structure, name, layout)
    r_s, s = dense_blocks(structure, "S", layout)
    kpts = np.atleast_2d(np.asarray(kpts, dtype=np.float64))
    return band_energies(bloch_sum(r_h, h, kpts), bloch_sum(r_s, s, kpts))


def crystal_errors(pred: HamiltonianStructure, ref: HamiltonianStructure, layout: OrbitalLayout) -> dict:
    """H MAE over blocks (µHa) and occupied-band MAE (meV) against pyscf, for the prediction and for H0.

    H MAE needs the same atom images in both (else only bands). Bands are compared at the reference's off-mesh
    ``check_kpts`` with the pyscf ``check_bands`` stored by the
    generator; ``reference_h_occupied_band_mae_mev`` is the floor set by the reference H(R) itself.
    """
    keys = list(ref.blocks_of("H"))
    kpts, bands = np.asarray(ref.meta["check_kpts"]), np.asarray(ref.meta["check_bands"])
    occ = int(ref.meta["n_occupied"])
    out = {}
    if set(keys) <= set(pred.blocks_of("H")):  # same atom images (a CIF may wrap atoms: then bands only)
        err = np.concatenate([np.abs(pred.blocks["H"][k] - ref.blocks["H"][k]).ravel() for k in keys])
        err0 = np.concatenate([np.abs(ref.blocks["H0"][k] - ref.blocks["H"][k]).ravel() for k in keys])
        out = {"h_mae_microhartree": float(err.mean() * 1e6), "h0_mae_microhartree": float(err0.mean() * 1e6)}
    for name, st, tag in (("model", pred, "H"), ("h0", ref, "H0"), ("reference_h", ref, "H")):
        b = structure_bands(st, layout, kpts, tag)
        out[f"{name}_occupied_band_mae_mev"] = float(np.abs(b[:, :occ] - bands[:, :occ]).mean() * HARTREE_MEV)
    return out


def kpath(numbers, positions, lattice, n: int = 60, symprec: float = 0.1) -> tuple[np.ndarray, np.ndarray, list]:
    """High-symmetry path: fractional k (n', 3) of ``lattice``, path length x (n',) in 1/Å, ticks ``[(x, label)]``.

    pymatgen's path is given in Cartesian coordinates of its standard primitive cell (spglib's standardised
    orientation), rotated back to the input's orientation and mapped to this lattice's reciprocal basis,
    ``k_frac = k_cart · Lᵀ / 2π`` (any cell of the crystal: primitive, conventional, rotated).
    ``symprec`` (Å) is loose so that slightly displaced structures keep the path of their ideal lattice.
    """
    import warnings

    from pymatgen.core import Lattice, Structure
    from pymatgen.symmetry.analyzer import SpacegroupAnalyzer
    from pymatgen.symmetry.bandstructure import HighSymmKpath

    st = Structure(Lattice(lattice), [int(z) for z in numbers], positions, coords_are_cartesian=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = HighSymmKpath(st, symprec=symprec)
        # spglib's standardisation rotates Cartesian space (x_std = R x): bring k back, k_in = Rᵀ k_std
        rot = np.asarray(SpacegroupAnalyzer(st, symprec=symprec).get_symmetry_dataset().std_rotation_matrix)
    kp = path.kpath
    cart = {name: kp["kpoints"][name] @ path.prim_rec.matrix @ rot for name in kp["kpoints"]}
    segments = [(cart[a], cart[b], a, b) for branch in kp["path"] for a, b in zip(branch[:-1], branch[1:], strict=True)]
    total = sum(np.linalg.norm(b - a) for a, b, _, _ in segments)
    ks, xs, ticks, x0 = [], [], [], 0.0
    for a, b, la, lb in segments:
        length = np.linalg.norm(b - a)
        m = max(2, round(n * length / total))
        t = np.linspace(0.0, 1.0, m)
        ks.append(a + t[:, None] * (b - a))
        xs.append(x0 + t * length)
        ticks += [(x0, la), (x0 + length, lb)]
        x0 += length
    kfrac = np.vstack(ks) @ np.asarray(lattice).T / (2 * np.pi)
    return kfrac, np.concatenate(xs), ticks
