"""Training the crystal network (:class:`~sciml.hamiltonian.crystal_net.CrystalNet`) with a band-energy loss.

Loss over the training crystals (full batch, float64):

    L = w_real · mean_c ((ŷ_c − y_c)/σ_c)²  +  w_eig · mean_{k,b} ((ε_b(k) − ε_b^ref(k)) / eig_scale)²,

the first term the normalised real-space block MSE of :func:`sciml.hamiltonian.loss.hamiltonian_loss` on the
atoms and network edges (``y = ΔH − base``), the second on the ``n_occupied + n_virtual`` lowest bands at the
generator's SCF k-mesh (meta ``kpts``): the predicted blocks are assembled into dense ``H(R)`` and symmetrised,
``H_ij(R) = ½ (B_ij(R) + B_ji(−R)ᵀ)`` (as :func:`~sciml.hamiltonian.crystal.predict_crystal` does), Bloch-summed,
``H(k) = Σ_R e^{2πi k·R} H(R)`` (:func:`~sciml.hamiltonian.periodic.bloch_sum_torch`), with ``S(k)`` from the
stored S blocks, and ``ε = eigvalsh(S^{-1/2} H S^{-1/2})`` (:func:`~sciml.hamiltonian.periodic.band_energies_torch`).
References: pyscf's ``mo_energy`` at those k (meta), else the bands of the reference H(R).

Base of the residual: by default the ridge fitted on all training crystals (in-sample). It nearly interpolates
its training blocks (λ = 1e-6), so the residual and the training band error start near zero and the network
learns small corrections only. ``cross_fit=True`` (≥ 2 crystals) uses for training crystal ``j`` the ridge refitted
without ``j`` (stacking: the residual then looks like a held-out one) while prediction uses the ridge fitted on
all; with 2–3 crystals per element the refitted ridges are much worse than the full one and the network learns
to over-correct (see docs/hamiltonian.md), hence off by default. AdamW, cosine learning rate, seeded; the
weights with the lowest training loss are kept.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import torch

from sciml.hamiltonian.crystal import CRYSTAL_RIDGE, concat_items, fit_crystal_ridge, ridge_irreps
from sciml.hamiltonian.crystal_net import CrystalNet, normaliser_statistics
from sciml.hamiltonian.loss import hamiltonian_loss
from sciml.hamiltonian.periodic import band_energies_torch, bloch_sum_torch, dense_blocks, structure_bands

CRYSTAL_LOSS = {"real": 1.0, "eig": 1.0, "eig_scale": 1e-3, "n_virtual": 2}
CRYSTAL_TRAIN = {"steps": 300, "lr": 2e-3, "weight_decay": 0.0, "min_lr_ratio": 0.05, "seed": 0, "cross_fit": False}


def band_setup(model: CrystalNet, s, it: dict, n_virtual: int) -> dict:
    """Index tensors that scatter item blocks into dense ``H(R)`` ``(n_R, n, n)``, plus ``S(k)`` and target bands."""
    layout, (nb, eb) = model.layout, model.bases
    off = layout.atom_offsets(s.numbers)
    n = int(off[-1])
    keys = sorted(it["node_keys"], key=lambda k: k[3]) + list(it["edge_keys"])
    rs = sorted({k[:3] for k in keys})
    index = {r: m for m, r in enumerate(rs)}
    neg = torch.tensor([index.get(tuple(-v for v in r), len(rs)) for r in rs])
    scatter, present = [], torch.zeros(len(rs) * n * n, dtype=torch.float64)
    kinds = ((nb, it["node_type"], 0), (eb, it["edge_type"], len(it["node_keys"])))
    for kind, (basis, types, first) in enumerate(kinds):
        for t, (za, zb) in enumerate(basis.pairs):
            sel = (types == t).nonzero().flatten()
            if len(sel) == 0:
                continue
            na, nbo = layout.n_orbitals(za), layout.n_orbitals(zb)
            k = [keys[first + int(m)] for m in sel]
            r0 = torch.tensor([index[q[:3]] * n * n + off[q[3]] * n + off[q[4]] for q in k])
            idx = r0[:, None, None] + torch.arange(na)[None, :, None] * n + torch.arange(nbo)[None, None, :]
            present[idx.reshape(-1)] = 1.0
            scatter.append((kind, sel, idx.reshape(-1), za, zb))
    p = torch.cat([present.view(len(rs), n, n), torch.zeros(1, n, n, dtype=torch.float64)])
    count = (p[:-1] + p[neg].transpose(-1, -2)).clamp_min(1.0)
    if "kpts" not in s.meta or "n_occupied" not in s.meta:
        raise ValueError(f"{s.meta.get('source', 'structure')}: no kpts / n_occupied in its meta (info.json); the band "
                         "loss needs them: regenerate with `sciml data hamiltonian --crystal` or set loss eig=0")
    kpts = np.asarray(s.meta["kpts"], dtype=np.float64)
    r_s, s_r = dense_blocks(s, "S", layout)
    n_bands = min(int(s.meta["n_occupied"]) + int(n_virtual), n)
    ref = (np.asarray(s.meta["mo_energy"], dtype=np.float64) if "mo_energy" in s.meta
           else structure_bands(s, layout, kpts, "H"))[:, :n_bands]
    return {"R": torch.tensor(rs, dtype=torch.float64).reshape(-1, 3), "n": n, "neg": neg, "count": count,
            "scatter": scatter, "kpts": torch.from_numpy(kpts), "n_bands": n_bands, "target": torch.from_numpy(ref),
            "sk": bloch_sum_torch(r_s, torch.from_numpy(s_r), kpts)}


def bands_torch(model: CrystalNet, h_node: torch.Tensor, h_edge: torch.Tensor, setup: dict) -> torch.Tensor:
    """Lowest ``n_bands`` band energies ``(n_k, n_bands)`` (Hartree) of full-H irreps, differentiable."""
    nb, eb = model.bases
    n, n_r = setup["n"], len(setup["R"])
    flat = h_node.new_zeros(n_r * n * n)
    for kind, sel, idx, za, zb in setup["scatter"]:
        x = (h_node if kind == 0 else h_edge)[sel]
        flat = flat.index_add(0, idx, (nb if kind == 0 else eb).to_blocks(x, za, zb).reshape(-1))
    b = torch.cat([flat.view(n_r, n, n), flat.new_zeros(1, n, n)])
    hr = (b[:-1] + b[setup["neg"]].transpose(-1, -2)) / setup["count"]
    hk = bloch_sum_torch(setup["R"], hr, setup["kpts"])
    return band_energies_torch(hk, setup["sk"])[:, : setup["n_bands"]]


def merge_items(items: list) -> dict:
    """One disjoint graph of all crystals' items (for a single network call); keeps ``sel`` and the sizes."""
    merged = concat_items(items) | {"sel": torch.cat([it["sel"] for it in items])}
    merged["n_nodes"] = [len(it["node_type"]) for it in items]
    merged["n_sel"] = [int(it["sel"].sum()) for it in items]
    return merged


def crystal_loss(model: CrystalNet, items: list, bases: list, setups: list, weights: dict,
                 merged: dict | None = None) -> dict:
    """:func:`hamiltonian_loss` over all crystals (see the module docstring); ``loss``, ``real``, ``eig``."""
    merged = merged or merge_items(items)
    node_all, edge_all = model.residual(merged)
    parts = zip(items, bases, setups, node_all.split(merged["n_nodes"]), edge_all.split(merged["n_sel"]), strict=True)
    tn, te, mn, me, eps, ref = ([] for _ in range(6))
    for it, base, setup, node, edge in parts:
        sel, nt = it["sel"], it["node_type"]
        et = it["edge_type"][sel]
        tn.append(model.norms["y_node"].normalize(it["h_node"] - it["x_node"] - base[0], nt))
        te.append(model.norms["y_edge"].normalize((it["h_edge"] - it["x_edge"] - base[1])[sel], et))
        mn.append((model.node_mask & model.norms["y_node"].alive())[nt])
        me.append((model.edge_mask & model.norms["y_edge"].alive())[et])
        if weights.get("eig", 0) > 0:
            dn, de = model.combine(it, (node, edge), base)
            eps.append(bands_torch(model, it["x_node"] + dn, it["x_edge"] + de, setup).reshape(-1))
            ref.append(setup["target"].reshape(-1))
    cat = torch.cat
    return hamiltonian_loss((node_all, edge_all), (cat(tn), cat(te)), (cat(mn), cat(me)),
                            cat(eps) if eps else None, cat(ref) if ref else None, weights)


def training_bases(model: CrystalNet, structures, items: list, settings: dict, cross_fit: bool) -> list:
    """Ridge ΔH irreps per training crystal: cross-fitted (ridge without it) or in-sample (``model.ridge``)."""
    if not cross_fit or len(structures) < 2:
        return [model.base(it) for it in items]
    out = []
    for j, it in enumerate(items):
        ridge, _, _ = fit_crystal_ridge([s for m, s in enumerate(structures) if m != j], model.layout, settings)
        out.append(ridge_irreps(ridge, it))
    return out


def fit_crystal_net(structures, layout, ridge: dict | None = None, network: dict | None = None,
                    loss: dict | None = None, train: dict | None = None) -> tuple[CrystalNet, dict]:
    """Fit the ridge on ``structures``, then train the network residual; ``(model, history)``.

    ``history``: ``loss`` per step (float), ``best_step``, ``best_loss``, ``seconds`` and the settings used.
    """
    settings = CRYSTAL_RIDGE | (ridge or {})
    weights, opts = CRYSTAL_LOSS | (loss or {}), CRYSTAL_TRAIN | (train or {})
    fitted, _, _ = fit_crystal_ridge(structures, layout, settings)
    torch.manual_seed(int(opts["seed"]))
    model = CrystalNet(layout, settings | {"shapes": fitted.shapes}, network or {})
    model.ridge.load_state_dict(fitted.state_dict(), strict=True)
    items = [model.items(s) for s in structures]
    bases = training_bases(model, structures, items, settings, bool(opts["cross_fit"]))
    residuals = [(it["h_node"] - it["x_node"] - b[0], it["h_edge"] - it["x_edge"] - b[1])
                 for it, b in zip(items, bases, strict=True)]
    model.set_statistics(normaliser_statistics(model, items, residuals))
    setups = ([band_setup(model, s, it, weights["n_virtual"]) for s, it in zip(structures, items, strict=True)]
              if weights["eig"] > 0 else [None] * len(items))
    opt = torch.optim.AdamW(model.net.parameters(), lr=opts["lr"], weight_decay=opts["weight_decay"])
    steps = int(opts["steps"])
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(steps, 1),
                                                       eta_min=opts["lr"] * opts["min_lr_ratio"])
    start, history, best = time.perf_counter(), [], (float("inf"), -1, None)
    merged = merge_items(items)
    for step in range(steps):
        opt.zero_grad()
        out = crystal_loss(model, items, bases, setups, weights, merged)
        value = float(out["loss"].detach())
        if not np.isfinite(value):
            raise FloatingPointError(f"crystal network loss is {value} at step {step}")
        history.append(value)
        if value < best[0]:
            best = (value, step, copy.deepcopy(model.net.state_dict()))
        out["loss"].backward()
        opt.step()
        sched.step()
    if best[2] is not None:
        model.net.load_state_dict(best[2])
    return model.eval(), {"loss": history, "best_step": best[1], "best_loss": best[0],
                          "seconds": time.perf_counter() - start, "loss_settings": weights, "train": opts}
