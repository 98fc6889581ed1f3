"""The crystal model artifact: fitted ridge (+ optional network), layout, generator settings, per-band conformal scores.

With a network (:class:`~sciml.hamiltonian.crystal_net.CrystalNet`, trained by
:func:`~sciml.hamiltonian.crystal_train.fit_crystal_net`) the weights file holds its whole state dict (ridge buffers
under ``ridge.``, network, normalisers, masks) and ``config.yaml`` its ``network`` section (settings, loss, training);
loading rebuilds it and loads strictly. Without one, the weights are the ridge's alone (format unchanged).

Conformal band intervals (split conformal, Mondrian by band index; Vovk et al. 2005): each training crystal
``i`` is held out in turn (leave-one-out), the ridge is refitted on the others, and the score of band ``b`` is

    s_ib = max_k |ε_b(k; predicted H_i) − ε_b(k; pyscf)|,     k over the generator's off-mesh ``check_kpts``,

(Hartree). The interval is ``ε_b(k) ± q_b``, ``q_b`` the ``⌈(n+1)(1−α)⌉``-th smallest of the ``n`` scores
(``+inf``, reported as ``null``, when that rank exceeds ``n``). If the prediction came from a model fitted
without the test structure's exchangeable peers this would be split conformal (≥ 1 − α for structures
exchangeable with the training ones, at all check k-points at once); here the prediction uses the model fitted
on all ``n``, i.e. the jackknife of Barber et al. (2021), whose ≥ 1 − α holds for stable fits (a closed-form
ridge changes little when one structure is removed) but is not distribution-free (their jackknife+, ≥ 1 − 2α,
is not implemented). Between the check k-points (k-path, mesh) the per-band radius is a heuristic extension.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from sciml.hamiltonian.crystal import CRYSTAL_RIDGE, fit_crystal_ridge, predict_crystal
from sciml.hamiltonian.data.datamodule import bases
from sciml.hamiltonian.orbitals import OrbitalLayout
from sciml.hamiltonian.periodic import structure_bands
from sciml.hamiltonian.structure import HamiltonianStructure
from sciml.hamiltonian.nn.ridge import TensorProductRidge

#: generator settings a crystal model stores (keys of ``CrystalSettings`` read from the training meta)
GENERATOR_KEYS = ("xc", "basis", "pseudo", "kmesh", "fock_kmesh", "cutoff", "ke_cutoff")


@dataclass
class CrystalModel:
    """A loaded crystal model: ridge, layout and its bases, generator settings, calibrator (or None)."""

    ridge: TensorProductRidge
    layout: OrbitalLayout
    generator: dict
    calibrator: torch.nn.Module | None = None
    meta: dict = field(default_factory=dict)
    net: torch.nn.Module | None = None

    @property
    def bases(self):
        """``(node_basis, edge_basis)`` of the layout."""
        return bases(self.layout)

    def predict(self, s: HamiltonianStructure) -> HamiltonianStructure:
        """``s`` with predicted H blocks: ridge + network when the model has one, else the ridge."""
        if self.net is not None:
            from sciml.hamiltonian.crystal_net import predict_crystal_net

            return predict_crystal_net(self.net, s)
        return predict_crystal(self.ridge, s, self.layout, *self.bases)


def crystal_fitter(settings: dict | None = None, network: dict | None = None):
    """``fit(structures, layout) -> predict(structure) -> structure with H``: the ridge, or ridge + network.

    ``network``: ``{"settings", "loss", "train"}`` overrides of
    :func:`~sciml.hamiltonian.crystal_train.fit_crystal_net`.
    """

    def fit(structures, layout):
        if network is None:
            ridge, nb, eb = fit_crystal_ridge(structures, layout, settings)
            return lambda s: predict_crystal(ridge, s, layout, nb, eb)
        from sciml.hamiltonian.crystal_net import predict_crystal_net
        from sciml.hamiltonian.crystal_train import fit_crystal_net

        model, _ = fit_crystal_net(structures, layout, settings, network.get("settings"), network.get("loss"),
                                   network.get("train"))
        return lambda s: predict_crystal_net(model, s)

    return fit


def generator_settings(structures) -> dict:
    """The level of theory / sampling shared by all training crystals (error naming the first that differs)."""
    first = {k: structures[0].meta.get(k) for k in GENERATOR_KEYS}
    for s in structures[1:]:
        mine = {k: s.meta.get(k) for k in GENERATOR_KEYS}
        if mine != first:
            raise ValueError(f"{s.meta.get('source')}: generated with {mine}, {structures[0].meta.get('source')} "
                             f"with {first}; fit one model per level of theory")
    return first


def loo_band_scores(structures, layout: OrbitalLayout, settings: dict | None = None, network: dict | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Leave-one-out per-band scores ``max_k |ε_pred − ε_pyscf|`` (Hartree) and band indices, both ``(m,)``.

    Needs ≥ 2 structures carrying ``check_kpts``/``check_bands`` (written by the generator). With ``network``
    (see :func:`crystal_fitter`) every fold retrains the network too.
    """
    fit = crystal_fitter(settings, network)
    if len(structures) < 2:
        raise ValueError(f"conformal calibration needs >= 2 training crystals, got {len(structures)}")
    scores, groups = [], []
    for i, held in enumerate(structures):
        if "check_bands" not in held.meta:
            raise ValueError(f"{held.meta.get('source')}: no check_bands in info.json meta; regenerate the data "
                             "with `sciml data hamiltonian --crystal`")
        pred = fit([s for j, s in enumerate(structures) if j != i], layout)(held)
        ref = np.asarray(held.meta["check_bands"])
        err = np.abs(structure_bands(pred, layout, held.meta["check_kpts"]) - ref).max(axis=0)
        scores.extend(err.tolist())
        groups.extend(range(len(err)))
    return np.asarray(scores), np.asarray(groups, dtype=np.int64)


def fit_band_calibrator(structures, layout: OrbitalLayout, settings: dict | None = None, alpha: float = 0.1,
                        network: dict | None = None):
    """A :class:`~sciml.uq.mondrian.MondrianConformal` (group = band index) on leave-one-out scores."""
    from sciml.uq.mondrian import MondrianConformal

    scores, groups = loo_band_scores(structures, layout, settings, network)
    return MondrianConformal(score="absolute", alpha=alpha).fit(torch.from_numpy(scores), torch.from_numpy(groups))


def band_radius(calibrator, n_bands: int, alpha: float) -> np.ndarray:
    """Per-band interval half-width ``q_b`` (Hartree), ``(n_bands,)``; ``inf`` for uncalibrated bands / small n."""
    if calibrator is None:
        return np.full(n_bands, np.inf)
    return calibrator.threshold_or_inf(torch.arange(n_bands), alpha).double().numpy()


def save_crystal_model(path, ridge: TensorProductRidge, layout: OrbitalLayout, settings: dict, meta: dict,
                       generator: dict | None = None, calibrator=None, net=None, network: dict | None = None) -> Path:
    """Write the fitted crystal model as a sciml artifact (task ``hamiltonian-crystal``).

    ``net``: a trained :class:`~sciml.hamiltonian.crystal_net.CrystalNet` whose ridge is ``ridge``; ``network``
    the facts recorded with it (``loss``, ``train``, ``history``); its ``settings`` are taken from ``net``.
    """
    from sciml.core.io.artifact import save_artifact

    config = {"task": "hamiltonian-crystal", "layout": layout.to_dict(), "ridge": settings | {"shapes": ridge.shapes},
              "generator": generator}
    if net is not None:
        config["network"] = (network or {}) | {"settings": dict(net.network)}
    cal = (f"per-band split-conformal scores from leave-one-out over {meta.get('n_structures')} structures"
           if calibrator is not None else "no conformal calibrator")
    kind = ("tensor-product ridge on H0 blocks H0(R) + equivariant network residual trained with a band-energy loss"
            if net is not None else "tensor-product ridge on H0 blocks H0(R)")
    card = (f"# {Path(path).name}\n\nE(3)-equivariant crystal Hamiltonian model ({kind}); "
            f"basis {meta.get('basis')}, {meta.get('xc')}. Fitted on {meta.get('n_structures')} "
            f"structures; predicts H(R) of crystals from structure files (pyscf.pbc builds H0 and S with "
            f"{generator}) or DeepH folders carrying H0 and S; {cal}.\n")
    state = net.state_dict() if net is not None else ridge.state_dict()
    return save_artifact(path, config=config, state_dict=state, metadata={"task": "hamiltonian-crystal",
                         **meta}, calibrator=calibrator.to_dict() if calibrator is not None else None, card=card)


def load_crystal_model(path) -> CrystalModel:
    """Load a ``hamiltonian-crystal`` artifact (strict weights, JSON calibrator)."""
    import sciml.uq.mondrian  # noqa: F401  (registers the "mondrian" calibrator)
    from sciml.core.io.artifact import ArtifactError, load_artifact
    from sciml.uq.split import calibrator_from_dict

    art = load_artifact(path)
    if art.config.get("task") != "hamiltonian-crystal":
        raise ArtifactError(f"{path}: task is {art.config.get('task')!r}, not a crystal Hamiltonian model")
    layout = OrbitalLayout.from_dict(art.config["layout"])
    nb, eb = bases(layout)
    r, net = art.config["ridge"], None
    if art.config.get("network"):
        from sciml.hamiltonian.crystal_net import CrystalNet

        net = CrystalNet(layout, r, art.config["network"]["settings"])
        net.load_state_dict(art.state_dict, strict=True)
        ridge = net.eval().ridge
    else:
        ridge = TensorProductRidge.from_settings(nb, eb, r)
        ridge.load_state_dict(art.state_dict, strict=True)
    cal = calibrator_from_dict(art.calibrator) if art.calibrator else None
    return CrystalModel(ridge, layout, art.config.get("generator") or {}, cal, dict(art.metadata or {}), net)


def fit_and_save(structures, layout: OrbitalLayout, output, lam: float = CRYSTAL_RIDGE["lam"],
                 calibrate: bool = True, network: dict | None = None) -> dict:
    """Fit on all ``structures``, calibrate by leave-one-out (if ≥ 2 carry check bands), save; summary dict.

    ``network``: train the network residual too (``{"settings", "loss", "train"}`` overrides, ``{}`` for the
    defaults); the leave-one-out calibration then retrains it in every fold.
    """
    settings = CRYSTAL_RIDGE | {"lam": lam}
    gen = generator_settings(structures)
    net, info = None, None
    if network is None:
        ridge, _, _ = fit_crystal_ridge(structures, layout, settings)
    else:
        from sciml.hamiltonian.crystal_train import fit_crystal_net

        net, hist = fit_crystal_net(structures, layout, settings, network.get("settings"), network.get("loss"),
                                    network.get("train"))
        ridge = net.ridge
        info = {"loss": hist["loss_settings"], "train": hist["train"], "best_step": hist["best_step"],
                "best_loss": hist["best_loss"], "train_seconds": round(hist["seconds"], 1)}
    cal = None
    if calibrate and len(structures) >= 2 and all("check_bands" in s.meta for s in structures):
        cal = fit_band_calibrator(structures, layout, settings, network=network)
    meta = {k: gen.get(k) for k in ("basis", "xc", "pseudo")} | {"n_structures": len(structures)}
    save_crystal_model(output, ridge, layout, settings, meta, gen, cal, net, info)
    return {"n_structures": len(structures), "calibrated": cal is not None, "generator": gen,
            "network": info}
