"""HamiltonianModel: the Hamiltonian predictor as a pure torch module (what prediction loads; no Lightning).

The network (:class:`sciml.hamiltonian.nn.HamiltonianNet`) maps H0 block irreps and geometry to normalised
irreps of ``ΔH = H − H0`` (``use_h0: false``: of ``H`` itself, with no H0 input); with a closed-form
:class:`~sciml.hamiltonian.nn.ridge.TensorProductRidge` base the prediction per block is

    ΔH = ridge(H0, r) + σ_t · net(Ĥ0, r)          (network edges; the ridge alone on the others),

read-outs zero-initialised so training starts at the closed-form solution.

- molecules (:class:`~sciml.hamiltonian.data.batch.HamiltonianBatch`): blocks are assembled into a symmetric
  matrix (:func:`~sciml.hamiltonian.loss.assemble`) whose generalised eigenvalues are the orbital energies;
- crystals (:class:`~sciml.hamiltonian.data.batch.CrystalBatch`): blocks are assembled into ``H(R)``,
  Bloch-summed and diagonalised at the generator's SCF k-mesh (:func:`~sciml.hamiltonian.loss.crystal_bands`).

``predict_step`` returns a :class:`~sciml.core.types.Prediction`: molecules, orbital energies (Hartree,
``n_occupied + n_virtual`` per structure, concatenated: what the conformal layer calibrates) with the matrices in
``meta``; crystals, the band energies at the batch's k-points (when known) with the H irreps in ``meta``.
Training adds the loss and the optimiser on top (:class:`sciml.hamiltonian.module.HamiltonianModule`); keeping
Lightning out of this module keeps it out of the start-up of ``sciml hamiltonian predict``.
"""

from __future__ import annotations

import torch

from sciml.core.radial import CosineCutoff
from sciml.core.types import Prediction
from sciml.hamiltonian.loss import assemble, crystal_bands, orbital_energies, overlap_filter
from sciml.hamiltonian.nn import BlockBasis, HamiltonianNet
from sciml.hamiltonian.nn.normalize import IrrepsNormalizer, clip_instances, irrep_instances
from sciml.hamiltonian.nn.ridge import TensorProductRidge
from sciml.hamiltonian.orbitals import OrbitalLayout

DTYPES = {"float32": torch.float32, "float64": torch.float64}


class HamiltonianModel(torch.nn.Module):
    """Ridge base + equivariant network: H0 and geometry in, H and orbital energies out (module docstring).

    Parameters
    ----------
    network : dict
        Keyword arguments of :class:`HamiltonianNet` other than the irreps/type counts, plus ``use_h0``
        and ``dtype`` (``float32`` or ``float64``).
    layout : dict
        ``OrbitalLayout.to_dict()`` of the training basis.
    stats : dict or None
        Normalisation statistics from the training split: ``x_node``, ``x_edge``, ``y_node``, ``y_edge``, each
        ``[mean, std]`` nested lists (see :class:`IrrepsNormalizer`); ``None`` for placeholders that a state
        dict then fills.
    meta : dict
        Facts stored for prediction: ``basis``, ``xc``, ``cutoff``, ``n_virtual``; crystals also ``periodic``
        (true) and ``generator`` (the pyscf.pbc settings that build H0 and S of new structures).
    ridge : dict or None
        Settings and fitted ``shapes`` of the closed-form :class:`TensorProductRidge` base model (with H0
        input only); the network then predicts the residual ``ΔH − ridge`` (``stats`` y_* describe it) from a
        zero-initialised read-out, so training starts at the closed-form solution.
    overlap_filter : float or None
        Molecules: keep only the part of the predicted ``ΔH`` on overlap eigenvectors with eigenvalue above it
        (:func:`~sciml.hamiltonian.loss.overlap_filter`); ``None``: no filter (artifacts without the setting).
    input_clip : float or None
        Bound of the network's normalised H0 inputs, in training standard deviations per irrep instance
        (:func:`~sciml.hamiltonian.nn.normalize.clip_instances`): an input far outside the training range is put
        on that sphere instead of being extrapolated; ``None``: no bound (artifacts without the setting).
    readout_cutoff : list of float or None
        ``[r_on, r_off]`` (Å): the network's edge corrections are multiplied by a cosine envelope that is 1 up to
        ``r_on`` and 0 from ``r_off`` on (:class:`~sciml.core.radial.CosineCutoff`); messages still pass up to the
        network's ``cutoff``. Far pairs, where H0 is nearly exact, then keep the ridge's ΔH instead of a network
        correction scaled by the bonded pairs' spread. ``None``: no envelope (artifacts without the setting).
    **training
        Training settings (``loss``, ``optim``): kept in :attr:`config` only.

    Attributes
    ----------
    config : dict
        The constructor's arguments (an artifact's ``module`` section).

    """

    def __init__(self, network: dict, layout: dict, stats: dict | None = None, meta: dict | None = None,
                 ridge: dict | None = None, overlap_filter: float | None = None, input_clip: float | None = None,
                 readout_cutoff: list | None = None, **training) -> None:
        super().__init__()
        self.config = {"network": network, "layout": layout, "stats": stats, "meta": meta, "ridge": ridge,
                       "overlap_filter": overlap_filter, "input_clip": input_clip,
                       "readout_cutoff": readout_cutoff} | training
        self.layout = OrbitalLayout.from_dict(layout)
        zs = self.layout.elements()
        self.node_basis = BlockBasis(self.layout.shells, [(z, z) for z in zs])
        self.edge_basis = BlockBasis(self.layout.shells, [(a, b) for a in zs for b in zs])
        kwargs = {k: v for k, v in network.items() if k not in ("dtype",)}
        self.use_h0 = bool(kwargs.get("use_h0", True))
        self.net = HamiltonianNet(str(self.node_basis.irreps), str(self.edge_basis.irreps), len(self.node_basis.pairs),
                                  len(self.edge_basis.pairs), **kwargs)
        self.net.to(DTYPES[network.get("dtype", "float32")])
        dims = {"x_node": self.node_basis, "y_node": self.node_basis, "x_edge": self.edge_basis,
                "y_edge": self.edge_basis}
        self.norms = torch.nn.ModuleDict({k: IrrepsNormalizer(*(stats[k] if stats else IrrepsNormalizer.identity(
            len(b.pairs), b.dim))) for k, b in dims.items()})
        # components each type uses; the loss also skips channels constant in the training targets (σ = 0)
        self.register_buffer("node_mask", torch.stack([self.node_basis.mask(*p) for p in self.node_basis.pairs]))
        self.register_buffer("edge_mask", torch.stack([self.edge_basis.mask(*p) for p in self.edge_basis.pairs]))
        for kind, basis in (("node", self.node_basis), ("edge", self.edge_basis)):
            self.register_buffer(f"{kind}_inst", irrep_instances(basis.irreps)[0], persistent=False)
        if readout_cutoff is not None and len(readout_cutoff) != 2:
            raise ValueError(f"model.readout_cutoff must be [r_on, r_off] in Å, got {readout_cutoff!r}")
        self.readout_envelope = CosineCutoff(readout_cutoff[1], readout_cutoff[0]) if readout_cutoff else None
        self.ridge = None
        if ridge and self.use_h0:
            self.ridge = TensorProductRidge.from_settings(self.node_basis, self.edge_basis, ridge)
            with torch.no_grad():
                for lin in (self.net.node_out, self.net.edge_out):
                    lin.weight.zero_()

    @property
    def meta(self) -> dict:
        """Facts stored for prediction (``basis``, ``xc``, ``cutoff``, ...; from :attr:`config`)."""
        return self.config["meta"] or {}

    @property
    def dtype_(self) -> torch.dtype:
        return next(self.net.parameters()).dtype

    def targets(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw target irreps (Hartree): ``H − H0`` with H0 input, else ``H``."""
        if self.use_h0:
            return batch.h_node - batch.x_node, batch.h_edge - batch.x_edge
        return batch.h_node, batch.h_edge

    def base(self, batch, vec: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Closed-form ΔH irreps of the ridge model (Hartree), zeros without one.

        A batch that carries this model's stored ridge output (:func:`attach_base`) gets it back without a ridge call.
        """
        if self.ridge is None:
            return torch.zeros_like(batch.x_node), torch.zeros_like(batch.x_edge)
        if batch.base_token == self.ridge.token:
            return batch.base_node, batch.base_edge
        return self.ridge(batch.x_node, batch.x_edge, vec, batch.edge_index, batch.node_type, batch.edge_type)

    def outputs(self, batch) -> dict[str, torch.Tensor]:
        """Network and ΔH irreps of a batch (molecules or crystals).

        Returns ``node (N, Dn)`` and ``edge (E_net, De)``: normalised network outputs (network edges only);
        ``base_node``, ``base_edge``: the ridge's ΔH (Hartree, all items); ``d_node (N, Dn)``, ``d_edge (E, De)``:
        the predicted ΔH (Hartree, float64; ``H`` itself with ``use_h0: false``).
        """
        dt, sel = self.dtype_, batch.net_edge
        vec64 = batch.vectors()
        nt, et = batch.node_type, batch.edge_type[sel]
        xn = self.norms["x_node"].normalize(batch.x_node, nt).to(dt)
        xe = self.norms["x_edge"].normalize(batch.x_edge[sel], et).to(dt)
        clip = self.config["input_clip"]
        if clip is not None:
            xn, xe = clip_instances(xn, self.node_inst, float(clip)), clip_instances(xe, self.edge_inst, float(clip))
        node, edge = self.net(nt, et, vec64[sel].to(dt), batch.edge_index[:, sel], xn, xe)
        node, edge = node * self.node_mask[nt], edge * self.edge_mask[et]
        bn, be = self.base(batch, vec64)
        dn = (self.norms["y_node"].denormalize(node, nt) + bn) * self.node_mask[nt]
        raw_edge = self.norms["y_edge"].denormalize(edge, et)
        if self.readout_envelope is not None:  # on the correction in Hartree, the type's mean included
            raw_edge = raw_edge * self.readout_envelope(vec64[sel].norm(dim=-1)).unsqueeze(-1)
            edge = self.norms["y_edge"].normalize(raw_edge, et).to(dt)
        de = be.index_add(0, sel.nonzero().flatten(), raw_edge)
        de = de * self.edge_mask[batch.edge_type]
        return {"node": node, "edge": edge, "base_node": bn, "base_edge": be, "d_node": dn, "d_edge": de}

    def h_irreps(self, batch, out: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Predicted H irreps (Hartree): ``H0 + ΔH`` with H0 input, else the network's H."""
        if self.use_h0:
            return batch.x_node + out["d_node"], batch.x_edge + out["d_edge"]
        return out["d_node"], out["d_edge"]

    def matrices(self, batch, out: dict) -> torch.Tensor:
        """Molecules: the predicted symmetric matrices, flattened ``(F,)`` float64, Hartree."""
        delta = assemble(out["d_node"], out["d_edge"], batch, self.node_basis, self.edge_basis)
        if not self.use_h0:
            return delta
        tau = self.config["overlap_filter"]
        return batch.h0 + (delta if tau is None else overlap_filter(delta, batch, float(tau)))

    def bands(self, batch, out: dict) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Crystals: predicted and reference band energies (Hartree), flattened over crystals; None without k."""
        if any(b is None for b in batch.bands):
            return None
        hn, he = self.h_irreps(batch, out)
        pred = [crystal_bands(n, e, setup, self.node_basis, self.edge_basis).reshape(-1) for n, e, setup in
                zip(hn.split(batch.n_nodes.tolist()), he.split(batch.n_edges.tolist()), batch.bands, strict=True)]
        return torch.cat(pred), torch.cat([setup["target"].reshape(-1) for setup in batch.bands])

    def forward(self, batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Molecules: ``(H_flat (F,) float64 Hartree, node_norm (N, Dn), edge_norm (E, De))``."""
        out = self.outputs(batch)
        return self.matrices(batch, out), out["node"], out["edge"]

    def predict_step(self, batch, batch_idx: int = 0) -> Prediction:
        """Energies (Hartree) as ``mean``, with the predicted Hamiltonian in ``meta``.

        Molecules: orbital energies, ``meta['hamiltonian']`` the flattened matrices (e3nn order). Crystals: band
        energies at the batch's k-points (empty without them), ``meta['h_node']``, ``meta['h_edge']`` the H irreps.
        """
        with torch.no_grad():
            out = self.outputs(batch)
            if batch.periodic:
                hn, he = self.h_irreps(batch, out)
                bands = self.bands(batch, out)
                mean = bands[0] if bands is not None else hn.new_zeros(0)
                return Prediction(mean=mean, meta={"unit": "hartree", "h_node": hn, "h_edge": he})
            h = self.matrices(batch, out)
            eps = orbital_energies(h, batch)
        return Prediction(mean=eps, meta={"unit": "hartree", "hamiltonian": h, "n_ao": batch.n_ao,
                                          "n_eig": batch.n_eig, "n_occ": batch.n_occ})


@torch.no_grad()
def attach_base(samples: list[dict], model: HamiltonianModel, collate, chunk: int = 32) -> None:
    """Store in each sample its ridge ΔH irreps and the ridge's ``token``.

    ``base_node`` ``(n, Dn)`` and ``base_edge`` ``(e, De)``: float64, Hartree, on the CPU, as
    :meth:`HamiltonianModel.base` computes them.

    The ridge is fixed while the network trains and reads only the sample's own H0 and geometry, so its output is
    the same in every epoch; batches collated from such samples carry it (:func:`sciml.hamiltonian.data.batch.
    collate`) and :meth:`HamiltonianModel.base` returns it instead of running the ridge, which on QM9 batches costs
    about 40% of a training step (``docs/benchmarks.md``). It does so only for the ridge whose token the batch
    carries, and a ridge draws a new token whenever its weights are set (fitted, or loaded directly or through the
    model), so another model, or this one with other weights, computes its own. ``collate``: the data module's;
    ``chunk``: samples per ridge call. Nothing is stored without a ridge; a sample's earlier values are replaced.
    """
    if model.ridge is None:
        return
    device = next(model.parameters()).device
    for k in range(0, len(samples), chunk):
        part = samples[k:k + chunk]
        for sample in part:
            sample.pop("base_token", None)
        batch = collate(part).to(device)
        node, edge = model.ridge(batch.x_node, batch.x_edge, batch.vectors(), batch.edge_index, batch.node_type,
                                 batch.edge_type)
        sizes = [(len(s["z"]), s["edge_index"].shape[1]) for s in part]
        nodes, edges = node.cpu().split([n for n, _ in sizes]), edge.cpu().split([e for _, e in sizes])
        for sample, n, e in zip(part, nodes, edges, strict=True):
            sample.update(base_node=n.clone(), base_edge=e.clone(), base_token=model.ridge.token)
