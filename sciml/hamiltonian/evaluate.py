"""Errors of a Hamiltonian model on a split of molecules: what export, the network check and the benchmarks report.

MAE of all matrix entries of H (µHartree), the gauge-corrected MAE ``MAE(H_pred, H_ref + μS)`` with
``μ = ⟨H_pred − H_ref, S⟩/⟨S, S⟩`` per structure, MAE of occupied orbital energies (meV), HOMO–LUMO gap error
(meV) and the occupied-orbital cosine similarity ``|c_predᵀ S c_ref|`` of S-normalised coefficient vectors
(QHNet's ψ, in %).
"""

from __future__ import annotations

import numpy as np
import torch

from sciml.hamiltonian.loss import gauge_shift, matrix_mae, orbital_energies
from sciml.hamiltonian.model import HamiltonianModel
from sciml.hamiltonian.units import HARTREE_MEV

__all__ = ["evaluate", "summarise"]


def _cosine(h_pred: np.ndarray, h_ref: np.ndarray, s: np.ndarray, n_occ: int) -> float:
    """Mean over occupied orbitals of ``|c_predᵀ S c_ref|`` (coefficients S-normalised by ``eigh``)."""
    from scipy.linalg import eigh

    _, c_pred = eigh(h_pred, s)
    _, c_ref = eigh(h_ref, s)
    return float(np.abs(np.einsum("ik,ij,jk->k", c_pred[:, :n_occ], s, c_ref[:, :n_occ])).mean())


@torch.no_grad()
def evaluate(module: HamiltonianModel, loader, h_source: str = "model") -> dict[str, np.ndarray]:
    """Per-structure errors over ``loader``; ``h_source="h0"`` scores H0 itself (the baseline).

    Returns arrays: ``h_mae`` and ``gauge_mae`` (µHa, per structure), ``occ_mae`` (meV per structure),
    ``gap_err`` (meV, signed), ``cosine`` (per structure), ``eps_pred``/``eps_ref`` (Hartree, all orbitals of
    the calibration target, concatenated).
    """
    module.eval()
    out = {k: [] for k in ("h_mae", "gauge_mae", "occ_mae", "gap_err", "cosine", "eps_pred", "eps_ref")}
    for batch in loader:
        h = module(batch)[0] if h_source == "model" else batch.h0
        eps = orbital_energies(h, batch)
        out["h_mae"].append(matrix_mae(h, batch.h, batch) * 1e6)
        out["gauge_mae"].append(matrix_mae(h, batch.h + gauge_shift(h, batch.h, batch) * batch.s, batch) * 1e6)
        out["eps_pred"].append(eps)
        out["eps_ref"].append(batch.y)
        k0 = 0
        for g, (n, k, occ) in enumerate(zip(batch.n_ao.tolist(), batch.n_eig.tolist(), batch.n_occ.tolist(),
                                            strict=True)):
            e, r = eps[k0:k0 + k], batch.y[k0:k0 + k]
            k0 += k
            out["occ_mae"].append((e[:occ] - r[:occ]).abs().mean().reshape(1) * HARTREE_MEV)
            gap = (e[occ] - e[occ - 1]) - (r[occ] - r[occ - 1]) if k > occ else torch.tensor(float("nan"))
            out["gap_err"].append(gap.reshape(1) * HARTREE_MEV)
            a, b = int(batch.mat_ptr[g]), int(batch.mat_ptr[g + 1])
            mats = [t[a:b].reshape(n, n).numpy() for t in (h, batch.h, batch.s)]
            out["cosine"].append(torch.tensor([_cosine(*mats, occ)]))
    return {k: torch.cat(v).double().numpy() for k, v in out.items()}


def summarise(res: dict[str, np.ndarray]) -> dict[str, float]:
    """Means of :func:`evaluate`'s arrays (gap: mean absolute error; cosine in %)."""
    return {"h_mae_microhartree": float(res["h_mae"].mean()), "gauge_mae_microhartree": float(res["gauge_mae"].mean()),
            "occupied_energy_mae_mev": float(res["occ_mae"].mean()),
            "gap_mae_mev": float(np.nanmean(np.abs(res["gap_err"]))), "occupied_cosine_percent":
            float(100 * res["cosine"].mean()), "n_structures": len(res["h_mae"])}
