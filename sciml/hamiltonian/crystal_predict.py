"""Predict crystal Hamiltonians H(R) and band structures from structure files (CIF, POSCAR, ...) or DeepH folders.

Per input: read the structure (:func:`sciml.core.structures.read_structure`), build H0(R) and S(R) with
pyscf.pbc at the model's stored generator settings (:func:`sciml.hamiltonian.data.gen_crystal.crystal_zeroth_step`;
DeepH folders already carry them), predict H(R) (the ridge, plus the network residual when the artifact has one:
:meth:`sciml.hamiltonian.crystal_model.CrystalModel.predict`), and write
``<output>/<name>/deeph/`` plus ``bands.json``: band energies (eV) along the high-symmetry k-path of the lattice
(pymatgen ``HighSymmKpath``, Setyawan–Curtarolo) and on the Γ-centred mesh, the valence-band maximum (VBM,
"HOMO"), conduction-band minimum (CBM, "LUMO") and gap, with per-band conformal intervals
(:mod:`sciml.hamiltonian.crystal_model`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from sciml.hamiltonian.crystal import crystal_errors
from sciml.hamiltonian.crystal_model import CrystalModel, band_radius, load_crystal_model
from sciml.hamiltonian.periodic import mesh_kpoints, structure_bands
from sciml.hamiltonian.structure import HamiltonianStructure
from sciml.hamiltonian.units import HARTREE_EV


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


def structure_from_file(path, model: CrystalModel, threads: int = 1) -> HamiltonianStructure:
    """Read a crystal structure file and build its H0(R) and S(R) with pyscf.pbc at the model's settings."""
    from sciml.core.structures import read_structure
    from sciml.hamiltonian.data.gen_crystal import CrystalSettings, crystal_zeroth_step
    from sciml.hamiltonian.data.generate import import_pyscf
    from sciml.hamiltonian.predict import check_elements

    st = read_structure(path)
    numbers = np.array([site.specie.Z for site in st], dtype=np.int64)
    check_elements(numbers, model.layout, str(path))
    import_pyscf()
    gen = {k: tuple(v) if isinstance(v, list) else v for k, v in model.generator.items() if v is not None or
           k in ("cutoff", "ke_cutoff")}
    if not {"basis", "pseudo", "xc", "kmesh", "fock_kmesh"} <= set(gen):
        raise ValueError(f"{path}: the crystal model stores no pyscf.pbc generator settings (basis, k-meshes); "
                         "refit it with `sciml hamiltonian fit-crystal` on generated data, or give DeepH folders")
    s, layout = crystal_zeroth_step(numbers, st.cart_coords, st.lattice.matrix, CrystalSettings(**gen,
                                                                                                threads=threads))
    for z in set(numbers.tolist()):
        if layout.shells_of(z) != model.layout.shells_of(z):
            raise ValueError(f"{path}: basis {gen['basis']!r} gives shells {layout.shells_of(z)} for Z={z}, the model "
                             f"has {model.layout.shells_of(z)}")
    s.meta["source"] = str(path)
    return s


def _finite(values) -> list:
    return [float(v) if math.isfinite(v) else None for v in np.ravel(values)]


def band_summary(bands: np.ndarray, n_occ: int, radius: np.ndarray) -> dict:
    """VBM, CBM, gap (eV) of bands (n_k, n_b) Hartree, with the conformal gap interval from per-band radii."""
    ev = bands * HARTREE_EV
    out = {"vbm_ev": float(ev[:, n_occ - 1].max())}
    if bands.shape[1] > n_occ:
        cbm = float(ev[:, n_occ].min())
        gap_r = (radius[n_occ - 1] + radius[n_occ]) * HARTREE_EV
        out |= {"cbm_ev": cbm, "gap_ev": cbm - out["vbm_ev"],
                "gap_lower_ev": _finite([cbm - out["vbm_ev"] - gap_r])[0],
                "gap_upper_ev": _finite([cbm - out["vbm_ev"] + gap_r])[0]}
    return out


def predict_one(s: HamiltonianStructure, model: CrystalModel, alpha: float, n_path: int,
                reference: HamiltonianStructure | None = None, symprec: float = 0.1
                ) -> tuple[HamiltonianStructure, dict]:
    """Predicted structure and its ``bands.json`` row (eV) for one crystal carrying H0 and S."""
    pred = model.predict(s)
    n_occ = int(s.meta.get("n_occupied") or round(s.numbers.sum() / 2))
    kp, x, ticks = kpath(s.numbers, s.positions, s.lattice, n_path, symprec)
    mesh = tuple(model.generator.get("fock_kmesh") or (4, 4, 4))
    km = mesh_kpoints(mesh)
    b_path, b_mesh = structure_bands(pred, model.layout, kp), structure_bands(pred, model.layout, km)
    radius = band_radius(model.calibrator, b_path.shape[1], alpha)
    row = {"source": s.meta.get("source", ""), "n_occupied": n_occ, "alpha": alpha,
           "band_radius_ev": _finite(radius * HARTREE_EV),
           "kpath": {"kpts": kp.tolist(), "x": x.tolist(), "ticks": ticks, "bands_ev": (b_path * HARTREE_EV).tolist()},
           "mesh": {"kmesh": list(mesh), "kpts": km.tolist(), "bands_ev": (b_mesh * HARTREE_EV).tolist()},
           **band_summary(np.vstack([b_path, b_mesh]), n_occ, radius)}
    kc = np.asarray(s.meta.get("check_kpts") or mesh_kpoints((2, 2, 2)))  # the generator's check points, if any
    row |= {"kpts": kc.tolist(), "bands_ev": (structure_bands(pred, model.layout, kc) * HARTREE_EV).tolist()}
    if reference is not None:  # same cell (maybe rotated, as CIF does): same fractional k; else via Cartesian k
        same = np.allclose(s.lattice @ s.lattice.T, reference.lattice @ reference.lattice.T, atol=1e-4)
        k_ref = kp if same else kp @ np.linalg.inv(s.lattice).T @ reference.lattice.T
        row["reference_kpath_bands_ev"] = (structure_bands(reference, model.layout, k_ref) * HARTREE_EV).tolist()
        if "check_bands" in reference.meta:
            row |= crystal_errors(pred, reference, model.layout)
            row["check_kpts"] = reference.meta["check_kpts"]
            row["check_bands_ev"] = (structure_bands(pred, model.layout, reference.meta["check_kpts"])
                                     * HARTREE_EV).tolist()
    return pred, row


def _read_input(path, model: CrystalModel, threads: int) -> HamiltonianStructure:
    from sciml.hamiltonian.data.deeph import read_deeph

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    if not path.is_dir():
        return structure_from_file(path, model, threads)
    s, _ = read_deeph(path, model.layout)
    for name in ("H0", "S"):
        if name not in s.blocks:
            raise ValueError(f"{path}: no {'overlaps.h5' if name == 'S' else 'hamiltonians_0.h5'}; the crystal "
                             "model needs H0 and S blocks (or give a structure file, e.g. CIF or POSCAR)")
    return s


def predict_crystal_inputs(paths, model_path, output, alpha: float = 0.1, n_path: int = 60, references=None,
                           plot: bool = False, threads: int = 1, symprec: float = 0.1):
    """Yield one ``bands.json`` row per input (structure file or DeepH folder) after writing its folder."""
    from sciml.hamiltonian.data.deeph import read_deeph, write_deeph
    from sciml.core.io.atomic import atomic_write_text

    model = load_crystal_model(model_path)
    for k, path in enumerate(paths):
        s = _read_input(path, model, threads)
        ref = read_deeph(references[k], model.layout)[0] if references else None
        if ref is not None and "H" not in ref.blocks:
            raise ValueError(f"{references[k]}: no hamiltonians.h5; a reference DeepH folder needs H (and S)")
        pred, row = predict_one(s, model, alpha, n_path, ref, symprec)
        p = Path(path)
        out = Path(output) / (f"{p.resolve().parent.name}-{p.name}" if p.is_dir() else p.stem)
        write_deeph(out / "deeph", pred, model.layout)
        row["folder"] = str(out)
        if plot:
            from sciml.hamiltonian.crystal_plot import plot_bands

            row["plot"] = str(plot_bands(row, out / "bands.png"))
        atomic_write_text(out / "bands.json", json.dumps(row, indent=1))
        yield row
