"""Predict crystal Hamiltonians H(R) and band structures from structure files (CIF, POSCAR, ...) or DeepH folders.

Per input: read the structure (:func:`sciml.core.structures.read_structure`), build H0(R) and S(R) with
pyscf.pbc at the model's stored generator settings (:func:`sciml.hamiltonian.data.gen_crystal.crystal_zeroth_step`;
DeepH folders already carry them), predict H(R) with the :class:`~sciml.hamiltonian.model.HamiltonianModel`,
and write ``<output>/<name>/deeph/`` plus ``bands.json``: band energies (eV) along the high-symmetry k-path
(:func:`sciml.hamiltonian.periodic.kpath`) and on the Γ-centred mesh, the valence-band maximum (VBM, "HOMO"),
conduction-band minimum (CBM, "LUMO") and gap, with per-band conformal intervals.

Conformal band intervals (split conformal, Mondrian by band index; Vovk et al. 2005): a calibration structure
``i`` scores band ``b`` by ``s_ib = max_k |ε_b(k; predicted H_i) − ε_b(k; pyscf)|`` over the generator's off-mesh
``check_kpts`` (Hartree). The interval is ``ε_b(k) ± q_b``, ``q_b`` the ``⌈(n+1)(1−α)⌉``-th smallest of the ``n``
scores, ``+inf`` (``null`` in JSON) when that rank exceeds ``n``, i.e. for ``α < 1/(n+1)``. Between the check
k-points (k-path, mesh) the per-band radius is a heuristic extension.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import torch

from sciml.hamiltonian.periodic import crystal_errors, kpath, mesh_kpoints, structure_bands
from sciml.hamiltonian.structure import HamiltonianStructure
from sciml.hamiltonian.units import HARTREE_EV


def band_radius(calibrator, n_bands: int, alpha: float) -> np.ndarray:
    """Per-band interval half-width ``q_b`` (Hartree), ``(n_bands,)``; ``inf`` for uncalibrated bands / small n."""
    if calibrator is None:
        return np.full(n_bands, np.inf)
    return calibrator.threshold_or_inf(torch.arange(n_bands), alpha).double().numpy()


def calibration_sizes(calibrator, bands) -> list[int]:
    """Calibration scores per band of ``bands`` (0 for an uncalibrated band; ``[]`` without a calibrator)."""
    if calibrator is None:
        return []
    counts = dict(zip(calibrator.group_ids.tolist(), calibrator.counts.tolist(), strict=True))
    return [int(counts.get(b, 0)) for b in bands]


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


def _finite(values) -> list:
    return [float(v) if math.isfinite(v) else None for v in np.ravel(values)]


def structure_from_file(path, predictor, threads: int = 1) -> HamiltonianStructure:
    """Read a crystal structure file and build its H0(R) and S(R) with pyscf.pbc at the model's settings."""
    from sciml.core.structures import read_structure
    from sciml.hamiltonian.data.gen_crystal import CrystalSettings, crystal_zeroth_step
    from sciml.hamiltonian.inputs import check_elements
    from sciml.hamiltonian.scf.h0 import import_pyscf

    st = read_structure(path)
    numbers = np.array([site.specie.Z for site in st], dtype=np.int64)
    check_elements(numbers, predictor.layout, str(path), periodic=True)
    import_pyscf()
    gen = {k: tuple(v) if isinstance(v, list) else v for k, v in predictor.generator.items() if v is not None or
           k in ("cutoff", "ke_cutoff")}
    if not {"basis", "pseudo", "xc", "kmesh", "fock_kmesh"} <= set(gen):
        raise ValueError(f"{path}: the crystal model stores no pyscf.pbc generator settings (basis, k-meshes); "
                         "retrain it on data from `sciml data hamiltonian --crystal`, or give DeepH folders")
    s, layout = crystal_zeroth_step(numbers, st.cart_coords, st.lattice.matrix, CrystalSettings(**gen,
                                                                                                threads=threads))
    for z in set(numbers.tolist()):
        if layout.shells_of(z) != predictor.layout.shells_of(z):
            raise ValueError(f"{path}: basis {gen['basis']!r} gives shells {layout.shells_of(z)} for Z={z}, the model "
                             f"has {predictor.layout.shells_of(z)}")
    s.meta["source"] = str(path)
    return s


@torch.no_grad()
def predict_crystal(s: HamiltonianStructure, predictor) -> HamiltonianStructure:
    """A copy of ``s`` (carrying H0 and S) with predicted, symmetrised ``H`` blocks."""
    from sciml.hamiltonian.data.batch import collate_crystals
    from sciml.hamiltonian.data.crystal import crystal_sample, structure_from_irreps

    m = predictor.module
    meta = m.meta
    sample = crystal_sample(s, predictor.layout, m.node_basis, m.edge_basis, float(meta["cutoff"]), with_target=False)
    pred = m.predict_step(collate_crystals([sample]))
    return structure_from_irreps(s, sample["keys"], pred.meta["h_node"], pred.meta["h_edge"], m.node_basis,
                                 m.edge_basis)


def band_row(s: HamiltonianStructure, pred: HamiltonianStructure, predictor, alpha: float, n_path: int,
             reference: HamiltonianStructure | None = None, symprec: float = 0.1) -> dict:
    """The ``bands.json`` row (eV) of one predicted crystal."""
    layout = predictor.layout
    n_occ = int(s.meta.get("n_occupied") or round(s.numbers.sum() / 2))
    kp, x, ticks = kpath(s.numbers, s.positions, s.lattice, n_path, symprec)
    mesh = tuple(predictor.generator.get("fock_kmesh") or (4, 4, 4))
    km = mesh_kpoints(mesh)
    b_path, b_mesh = structure_bands(pred, layout, kp), structure_bands(pred, layout, km)
    radius = band_radius(predictor.calibrator, b_path.shape[1], alpha)
    row = {"source": s.meta.get("source", ""), "n_occupied": n_occ, "alpha": alpha,
           "band_radius_ev": _finite(radius * HARTREE_EV),
           "kpath": {"kpts": kp.tolist(), "x": x.tolist(), "ticks": ticks, "bands_ev": (b_path * HARTREE_EV).tolist()},
           "mesh": {"kmesh": list(mesh), "kpts": km.tolist(), "bands_ev": (b_mesh * HARTREE_EV).tolist()},
           **band_summary(np.vstack([b_path, b_mesh]), n_occ, radius)}
    if "gap_ev" in row:
        row["gap_calibration_sizes"] = calibration_sizes(predictor.calibrator, (n_occ - 1, n_occ))
    kc = np.asarray(s.meta.get("check_kpts") or mesh_kpoints((2, 2, 2)))  # the generator's check points, if any
    row |= {"kpts": kc.tolist(), "bands_ev": (structure_bands(pred, layout, kc) * HARTREE_EV).tolist()}
    if reference is not None:  # same cell (maybe rotated, as CIF does): same fractional k; else via Cartesian k
        same = np.allclose(s.lattice @ s.lattice.T, reference.lattice @ reference.lattice.T, atol=1e-4)
        k_ref = kp if same else kp @ np.linalg.inv(s.lattice).T @ reference.lattice.T
        row["reference_kpath_bands_ev"] = (structure_bands(reference, layout, k_ref) * HARTREE_EV).tolist()
        if "check_bands" in reference.meta:
            row |= crystal_errors(pred, reference, layout)
            row["check_kpts"] = reference.meta["check_kpts"]
            row["check_bands_ev"] = (structure_bands(pred, layout, reference.meta["check_kpts"])
                                     * HARTREE_EV).tolist()
    return row


def read_crystal_input(path, predictor, threads: int = 1) -> HamiltonianStructure:
    """A structure file (pyscf.pbc builds H0 and S) or a DeepH folder carrying H0 and S."""
    from sciml.hamiltonian.data.deeph import read_deeph

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    if not path.is_dir():
        return structure_from_file(path, predictor, threads)
    s, _ = read_deeph(path, predictor.layout)
    for name in ("H0", "S"):
        if name not in s.blocks:
            raise ValueError(f"{path}: no {'overlaps.h5' if name == 'S' else 'hamiltonians_0.h5'}; the crystal "
                             "model needs H0 and S blocks (or give a structure file, e.g. CIF or POSCAR)")
    return s


def predict_crystal_inputs(paths, predictor, output, alpha: float = 0.1, n_path: int = 60, references=None,
                           plot: bool = False, threads: int = 1, symprec: float = 0.1, progress: bool = True):
    """Yield one ``bands.json`` row per input (structure file or DeepH folder) after writing its folder.

    A progress bar on stderr (terminals only) counts structures and names the stage (pyscf H0/S, network, bands,
    write).
    """
    from tqdm.auto import tqdm

    from sciml.core.io.atomic import atomic_write_text
    from sciml.hamiltonian.data.deeph import read_deeph, write_deeph

    bar = tqdm(total=len(paths), desc="crystals", unit="structure", file=sys.stderr, disable=None if progress else True)
    try:
        for k, path in enumerate(paths):
            p = Path(path)
            bar.set_postfix_str(f"{p.name}: {'read' if p.is_dir() else 'pyscf.pbc H0, S'}")
            s = read_crystal_input(path, predictor, threads)
            ref = read_deeph(references[k], predictor.layout)[0] if references else None
            if ref is not None and "H" not in ref.blocks:
                raise ValueError(f"{references[k]}: no hamiltonians.h5; a reference DeepH folder needs H (and S)")
            bar.set_postfix_str(f"{p.name}: network")
            pred = predict_crystal(s, predictor)
            bar.set_postfix_str(f"{p.name}: bands")
            row = band_row(s, pred, predictor, alpha, n_path, ref, symprec)
            bar.set_postfix_str(f"{p.name}: write")
            out = Path(output) / (f"{p.resolve().parent.name}-{p.name}" if p.is_dir() else p.stem)
            write_deeph(out / "deeph", pred, predictor.layout)
            row["folder"] = str(out)
            if plot:
                from sciml.hamiltonian.plot import plot_bands

                row["plot"] = str(plot_bands(row, out / "bands.png"))
            atomic_write_text(out / "bands.json", json.dumps(row, indent=1))
            bar.update()
            yield row
    finally:
        bar.close()
