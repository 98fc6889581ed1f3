r"""PerturbationModel: the single-cell perturbation flow as a pure torch module (what prediction loads).

Sampling integrates ``dx/dt = v_θ`` from the path's start (noise or control cells) with Euler or RK4
(:mod:`sciml.perturbation.nn.flow`); the velocity is the PAD-Transformer's on top of an effect prior (additive
or a per-gene combination rule, shrunk towards additive). Training adds the flow-matching + MMD loss and the
optimiser (:class:`sciml.perturbation.module.PerturbationFlow`); keeping Lightning out of this module keeps it
out of ``sciml perturbation predict``.

Batches follow the data-module contract: ``x_pert``, ``x_ctrl`` float32 ``(C, N, G)`` (log1p expression),
``pert_genes`` int64 ``(C, 2)`` (vocabulary indices, −1 padding), ``condition`` list of ``C`` names.
"""

from __future__ import annotations

import torch
from torch import Tensor

from sciml.core.types import Prediction
from sciml.perturbation.distances import RBF_SCALES
from sciml.perturbation.nn import PATHS, PADTransformer, close, integrate, masking_prior, project_mean
from sciml.perturbation.nn.combination import CombinationRule
from sciml.perturbation.nn.masking import masking
from sciml.perturbation.nn.shrinkage import EB_DENOISERS, JOINT_DENOISER

FLOW_DEFAULTS = {"path": "control", "sigma": 0.1, "ot": True, "mmd_weight": 2.0, "mmd_scales": list(RBF_SCALES),
                 "steps": 20, "method": "rk4", "val_steps": 4, "max_genes": None, "prior_dropout": 0.2,
                 "additive_skip": True, "prior": "additive", "combination_hidden": 32,
                 "remainder_mean": 1.0, "shrink": 1.0, "kappa": 0.0, "denoise": 0.0, "blend": 1.0, "own_genes": "rule",
                 "closure": False, "nonnegative": True, "exact_mean": False, "additive_fallback": False}
PRIORS = ("additive", "combination", "masking")
OWN_GENES = ("rule", "additive")
PRIOR_CHANNELS = 4
OPTIM_DEFAULTS = {"lr": 1e-3, "weight_decay": 1e-4, "scheduler": "cosine"}


class PerturbationModel(torch.nn.Module):
    """Generate perturbed cells from control cells and the perturbed genes (conditional flow, module docstring).

    Parameters
    ----------
    network : dict
        Keyword arguments of :class:`~sciml.perturbation.nn.PADTransformer` except ``n_genes``.
    genes : list of str
        Gene vocabulary (the data module's ``perturbation_genes``): the ``n_measured`` measured genes in the
        column order of every batch, then perturbed genes that are not measured.
    n_measured : int or None
        Number of measured genes ``G`` (``None``: all of ``genes``).
    perturbed_genes : list of str
        Genes perturbed in the training split (others are predicted from their graph embedding only).
    flow : dict
        Over :data:`FLOW_DEFAULTS`: ``path`` (``control`` or ``noise``), ``sigma``, ``ot`` (minibatch-OT pairing of
        the control path), ``mmd_weight`` λ, ``mmd_scales``, sampling ``steps``/``method``, ``val_steps`` (Euler
        steps of the validation metric), ``max_genes`` (random gene subset per training step, ``None``: all),
        ``prior`` (``additive``, ``combination`` or ``masking``), ``combination_hidden``, ``remainder_mean``, ``kappa``,
        ``denoise``, ``blend``, ``closure``, ``exact_mean`` (see below).
    optim : dict
        Over :data:`OPTIM_DEFAULTS`: ``lr``, ``weight_decay``, ``scheduler`` (``cosine`` or ``none``); used by
        training only.
    effect_prior : bool
        Condition the control tokens on the measured mean effects of the perturbed genes' singles in the
        training split (buffers ``single_effect`` ``(V, G)``, ``has_effect`` ``(V,)``, set by
        :meth:`set_single_effects`): per gene ``Δ_a + Δ_b``, ``Δ_a·Δ_b`` and the counts of known and perturbed
        genes. A double of seen singles thus starts from the additive effect and the network learns the
        interaction; unknown singles (held-out genes) enter as zeros. During training each known effect is
        hidden with probability ``flow.prior_dropout`` so the model also learns to predict without it. With the
        control path and ``flow.additive_skip``, ``Δ_a + Δ_b`` is added to the velocity (the straight path from a
        control cell shifted by the additive effect), so the untrained model is the additive baseline and the
        network learns the non-additive remainder. With ``flow.prior: combination`` the prior mean of a double
        with both singles known is instead a per-gene combination rule
        (:class:`~sciml.perturbation.nn.combination.CombinationRule`, buffers/parameters ``combination.*``)
        fitted on the training doubles by :meth:`fit_combination` and frozen; the network learns the remainder.
        With ``flow.prior: masking`` it is :func:`~sciml.perturbation.nn.masking.masking_prior` of the two singles
        (``flow.kappa`` κ, ``flow.denoise`` τ; ``"auto"``: chosen by
        :func:`sciml.perturbation.select.choose_masking` when the model is built), using the singles' squared
        standard errors (buffer ``single_var`` ``(V, G)``, set with the effects); ``flow.denoise: eb`` replaces the
        James–Stein threshold by empirical-Bayes shrinkage of all singles at once
        (:func:`~sciml.perturbation.nn.shrinkage.ash_posterior_mean`, computed from the buffers when first needed), and
        ``eb_single`` by one such prior per single (:func:`~sciml.perturbation.nn.shrinkage.ash_by_row`), and
        ``eb_joint`` does so to the singles estimated jointly with the training doubles
        (:mod:`~sciml.perturbation.nn.joint`, buffers ``joint_effect``, ``joint_var`` set by
        :meth:`set_joint_singles`; the measured singles until then);
        with ``flow.closure`` (``"auto"``:
        on when the data are closed, see :func:`sciml.perturbation.task.data_closure`) that prior mean is rescaled
        to the controls' expected total per cell (:func:`~sciml.perturbation.nn.masking.close`, buffer ``closure``).
        ``flow.blend`` ``w`` ∈ [0, 1] (masking only; 1: off) averages that prior mean with the combination rule's,
        ``w·masking + (1 − w)·(Δa + Δb + λ·(rule − Δa − Δb))``: the model then also holds a fitted rule, and κ, τ
        are chosen for the masking part alone.
        ``flow.remainder_mean`` ``w`` ∈ [0, 1] shrinks the network's per-condition mean velocity (over the
        condition's cells) to ``w`` times itself for conditions whose singles are all known: ``w = 0`` fixes the
        generated mean effect to the prior mean and the network only shapes the distribution around it.
        Robustness settings (issue 14): ``flow.shrink`` ``λ`` ∈ [0, 1] mixes the rule with additive,
        ``prior = Δa + Δb + λ·(rule − Δa − Δb)`` (``"auto"``: chosen on val by
        :func:`sciml.perturbation.select.choose_shrink` when the model is built; 1 until then);
        ``flow.own_genes: additive`` keeps the perturbed genes' own columns of a double at their measured singles'
        sum (the rule corrects only the other genes); ``flow.nonnegative`` projects generated cells onto
        ``x ≥ 0`` after the last ODE step (log1p values below zero become 0, i.e. zero counts; this can only raise
        a gene's mean, by ``E[max(−x, 0)]`` of the unprojected sample); ``flow.additive_fallback`` (set at export
        when the model does not beat additive on val, :func:`sciml.perturbation.select.apply_fallback`) makes the
        generated mean of every condition exactly the additive baseline's: control mean + the sum of the measured
        singles' effects (a single never measured in training: buffer ``unknown_effect`` ``(G,)``, set by
        ``apply_fallback`` to the additive baseline's stand-in, the mean training effect), clipped at 0 under
        ``nonnegative``; the network only shapes the cells, which :meth:`sample` moves to the nearest
        non-negative population with exactly that mean (:func:`~sciml.perturbation.nn.project_mean`).
        ``flow.exact_mean`` does the same for every condition whose singles are all known, with the model's own
        prior mean (under ``remainder_mean: 0`` this only removes the sampling error of the drawn control cells'
        mean and the bias of clipping each cell at 0).

    Attributes
    ----------
    config : dict
        The constructor's arguments (an artifact's ``module`` section); :meth:`set_flow` updates ``flow``.

    """

    def __init__(self, network: dict, genes: list[str], n_measured: int | None = None,
                 perturbed_genes: list[str] | None = None, flow: dict | None = None,
                 optim: dict | None = None, effect_prior: bool = True) -> None:
        super().__init__()
        self.config = {"network": network, "genes": list(genes), "n_measured": n_measured,
                       "perturbed_genes": perturbed_genes, "flow": dict(flow or {}), "optim": optim,
                       "effect_prior": effect_prior}
        self.net = PADTransformer(len(genes), prior_channels=PRIOR_CHANNELS if effect_prior else 0, **network)
        n_measured = n_measured or len(genes)
        self.register_buffer("single_effect", torch.zeros(len(genes), n_measured))
        self.register_buffer("has_effect", torch.zeros(len(genes), dtype=torch.bool))
        self.register_buffer("unknown_effect", torch.zeros(n_measured))  # additive fallback's stand-in single
        self.register_load_state_dict_pre_hook(_default_buffers)
        self.register_load_state_dict_post_hook(lambda module, keys: module._forget_shrunk())
        self._shrunk: Tensor | None = None  # flow.denoise "eb"/"eb_single"/"eb_joint": the shrunk singles, when needed
        self.flow = FLOW_DEFAULTS | (flow or {})
        self.optim = OPTIM_DEFAULTS | (optim or {})
        if self.flow["prior"] not in PRIORS:
            raise ValueError(f"flow.prior is {self.flow['prior']!r}; known: {list(PRIORS)}")
        if self.flow["closure"] not in (True, False, "auto"):
            raise ValueError(f"flow.closure is {self.flow['closure']!r}; use true, false or auto")
        if self.flow["own_genes"] not in OWN_GENES:
            raise ValueError(f"flow.own_genes is {self.flow['own_genes']!r}; known: {list(OWN_GENES)}")
        blend = self.flow["blend"]
        if not (isinstance(blend, int | float) and 0.0 <= blend <= 1.0):
            raise ValueError(f"flow.blend is {blend!r}; use a weight in [0, 1] (1: the prior alone)")
        if blend < 1.0 and self.flow["prior"] != "masking":
            raise ValueError(f"flow.blend {blend} averages the masking prior with the combination rule; it needs "
                             f"flow.prior: masking, not {self.flow['prior']!r} (or set blend: 1)")
        self.combination = None
        if self.flow["prior"] == "combination" or blend < 1.0:
            self.combination = CombinationRule(int(self.flow["combination_hidden"])).requires_grad_(False)
            self.register_buffer("ctrl_mean", torch.zeros(n_measured))  # μ_0 feature of the rule
        if self.flow["prior"] == "masking":
            self.register_buffer("single_var", torch.zeros(len(genes), n_measured))  # squared s.e. of single_effect
            self.register_buffer("joint_effect", torch.zeros(len(genes), n_measured))  # flow.denoise: eb_joint
            self.register_buffer("joint_var", torch.zeros(len(genes), n_measured))
            self.register_buffer("closure", torch.zeros(2, n_measured))  # μ0 and weights of nn.masking.close
        if self.flow["path"] not in PATHS:
            raise ValueError(f"flow.path is {self.flow['path']!r}; known: {sorted(PATHS)}")
        kwargs = {"ot": bool(self.flow["ot"])} if self.flow["path"] == "control" else {}
        self.path = PATHS[self.flow["path"]](sigma=self.flow["sigma"], **kwargs)

    def set_single_effects(self, effects: dict[int, Tensor], variances: dict[int, Tensor] | None = None) -> None:
        """Store measured single effects ``{vocabulary index: Δ (G,)}`` (training split only).

        ``variances``: their squared standard errors, same keys (kept under ``flow.prior: masking``; 0 if absent).
        """
        self.single_effect.zero_()
        self.has_effect.zero_()
        for i, delta in effects.items():
            self.single_effect[i] = torch.as_tensor(delta, dtype=self.single_effect.dtype)
            self.has_effect[i] = True
        if hasattr(self, "single_var"):
            self.single_var.zero_()
            for i, var in (variances or {}).items():
                self.single_var[i] = torch.as_tensor(var, dtype=self.single_var.dtype)
            self.joint_effect.copy_(self.single_effect)
            self.joint_var.copy_(self.single_var)
        self.unknown_effect.copy_(_mean_single(self.single_effect, self.has_effect))
        self._forget_shrunk()

    def set_joint_singles(self, effect: Tensor, var: Tensor) -> None:
        """Store the singles estimated with the training doubles, ``(S, G)`` each, in the rows of ``has_effect``.

        Used by ``flow.denoise: eb_joint`` (:func:`sciml.perturbation.select.fit_joint` computes them).
        """
        if not hasattr(self, "joint_effect"):
            raise ValueError("joint singles are used by flow.denoise: eb_joint, which needs flow.prior: masking")
        self.joint_effect[self.has_effect] = effect.to(self.joint_effect)
        self.joint_var[self.has_effect] = var.to(self.joint_var)
        self._forget_shrunk()

    def _forget_shrunk(self) -> None:
        self._shrunk = None

    def shrunk_singles(self) -> Tensor:
        """Single effects ``(V, G)`` after empirical-Bayes shrinkage (``flow.denoise``; unknown rows stay 0)."""
        if self._shrunk is None or self._shrunk.device != self.single_effect.device:
            known = self.has_effect
            joint = self.flow["denoise"] == JOINT_DENOISER
            effect, var = (self.joint_effect, self.joint_var) if joint else (self.single_effect, self.single_var)
            table = self.single_effect.clone()
            table[known] = EB_DENOISERS[self.flow["denoise"]](effect[known], var[known])
            self._shrunk = table
        return self._shrunk

    def set_closure(self, terms: Tensor | None) -> None:
        """Turn ``flow.closure`` on with :func:`~sciml.perturbation.nn.masking.closure_terms` ``(2, G)``; None: off."""
        if terms is not None and not hasattr(self, "closure"):
            raise ValueError("flow.closure needs flow.prior: masking")
        if hasattr(self, "closure"):
            self.closure.copy_(torch.zeros_like(self.closure) if terms is None else terms.to(self.closure))
        self.set_flow(closure=terms is not None)

    def set_unknown_effect(self, delta: Tensor) -> None:
        """Stand-in effect ``(G,)`` of a single never measured in training (used under ``additive_fallback``)."""
        self.unknown_effect.copy_(torch.as_tensor(delta, dtype=self.unknown_effect.dtype))

    def fit_combination(self, doubles: list[tuple[int, int, Tensor]], ctrl_mean: Tensor, seed: int = 0) -> float | None:
        """Fit the frozen combination rule on training doubles ``(index a, index b, Δ_ab (G,))``; ``ctrl_mean`` (G,).

        Needs :meth:`set_single_effects` first; doubles with an unknown single are skipped. Returns the fit MSE
        (``None`` without a rule or usable doubles).
        """
        if self.combination is None:
            return None
        self.ctrl_mean.copy_(torch.as_tensor(ctrl_mean, dtype=self.ctrl_mean.dtype))
        rows = [(a, b, d) for a, b, d in doubles if bool(self.has_effect[a]) and bool(self.has_effect[b])]
        if not rows:
            return None
        da = self.single_effect[[a for a, _, _ in rows]]
        db = self.single_effect[[b for _, b, _ in rows]]
        target = torch.stack([torch.as_tensor(d, dtype=da.dtype) for _, _, d in rows])
        mse = self.combination.requires_grad_(True).fit(da, db, self.ctrl_mean, target, seed=seed)
        self.combination.requires_grad_(False)
        return mse

    def set_flow(self, **values) -> None:
        """Change flow settings after construction (saved with the checkpoint / artifact config)."""
        if "denoise" in values and values["denoise"] != self.flow.get("denoise"):
            self._forget_shrunk()
        self.flow |= values
        self.config["flow"] = dict(self.config.get("flow") or {}) | values

    def shrink(self) -> float:
        """Weight ``λ`` of the combination rule over additive (``0`` under ``additive_fallback``; ``auto``: 1)."""
        if self.flow["additive_fallback"]:
            return 0.0
        value = self.flow["shrink"]
        return 1.0 if value == "auto" else float(value)

    def _prior_mean(self, d: Tensor, known: Tensor, valid: Tensor, pert: Tensor) -> Tensor:
        """Prior mean effect ``(C, G)`` of single effects ``d`` ``(C, P, G)`` over all measured genes.

        ``Δa + Δb``, or for doubles with both singles known the rule of ``flow.prior`` (:meth:`_double_rule`), with
        the perturbed genes' own columns additive under ``own_genes: additive``; under ``flow.closure`` such a
        double's row is then rescaled to the controls' expected total (:func:`~sciml.perturbation.nn.masking.close`);
        under ``flow.blend`` ``w < 1`` such a row is ``w`` times that plus ``1 − w`` times the combination rule's.
        """
        total = d.sum(1)
        if d.shape[1] != 2:
            return total
        rule = self._double_rule(d, pert)
        w = float(self.flow["blend"])
        comb = self._combination_rule(d) if w < 1.0 and self.flow["prior"] == "masking" else None
        if rule is None and comb is None:
            return total
        rows = (known.all(-1) & valid.all(-1))[:, None]
        both = rows & ~self._own_columns(pert, d.shape[-1]) if self.flow["own_genes"] == "additive" else rows
        out = total if rule is None else torch.where(both, rule, total)
        if rule is not None and self.flow["closure"] is True:
            out = torch.where(rows, close(out, self.closure), out)
        if comb is not None:
            out = torch.where(rows, w * out + (1.0 - w) * torch.where(both, comb, total), out)
        return out

    def _double_rule(self, d: Tensor, pert: Tensor) -> Tensor | None:
        """Prior mean ``(C, G)`` of doubles ``d`` ``(C, 2, G)`` by ``flow.prior``; ``None`` where it is additive.

        ``combination``: ``Δa + Δb + λ·(rule − Δa − Δb)``; ``masking``: :func:`masking_prior` with ``κ``, ``τ``
        (``"auto"`` not yet chosen counts as 0). Additive under ``additive_fallback``.
        """
        if self.flow["additive_fallback"]:
            return None
        if self.flow["prior"] == "combination":
            return self._combination_rule(d)
        if self.flow["prior"] == "masking":
            kappa = 0.0 if self.flow["kappa"] == "auto" else float(self.flow["kappa"])
            if self.flow["denoise"] in EB_DENOISERS:
                shrunk = self.shrunk_singles()[pert.clamp_min(0)]
                return masking(shrunk[:, 0], shrunk[:, 1], kappa)
            tau = 0.0 if self.flow["denoise"] == "auto" else float(self.flow["denoise"])
            if kappa == 0.0 and tau == 0.0 and self.flow["closure"] is not True:
                return None
            var = self.single_var[pert.clamp_min(0)]
            return masking_prior(d[:, 0], d[:, 1], var[:, 0], var[:, 1], kappa, tau)
        return None

    def _combination_rule(self, d: Tensor) -> Tensor | None:
        """``Δa + Δb + λ·(rule − Δa − Δb)`` ``(C, G)`` of doubles ``d`` ``(C, 2, G)``; ``None`` when ``λ = 0``."""
        lam = self.shrink()
        if self.combination is None or lam == 0.0:
            return None
        total = d.sum(1)
        return total + lam * (self.combination(d[:, 0], d[:, 1], self.ctrl_mean) - total)

    @staticmethod
    def _own_columns(pert: Tensor, n: int) -> Tensor:
        """Bool ``(C, n)``: column ``g`` is one of the condition's perturbed genes."""
        return (torch.arange(n, device=pert.device)[None, :, None] == pert[:, None, :]).any(-1)

    def prior_mean(self, pert: Tensor, genes: Tensor | None = None) -> Tensor:
        """Mean effect ``(C, G)`` the prior assigns to ``pert`` ``(C, P)``.

        No dropout; it is the generated mean under ``remainder_mean: 0``: the sum of the known singles' effects or
        the shrunk rule for doubles; under ``additive_fallback`` an unknown single counts as ``unknown_effect``.
        """
        valid = pert >= 0
        known = valid & self.has_effect[pert.clamp_min(0)]
        d = self.single_effect[pert.clamp_min(0)] * known[..., None]
        if self.flow["additive_fallback"]:
            d = d + (valid & ~known)[..., None] * self.unknown_effect
        mean = self._prior_mean(d, known, valid, pert)
        return mean if genes is None else mean[..., genes]

    def prior(self, pert: Tensor, genes: Tensor | None = None) -> Tensor | None:
        """Effect-prior channels ``(C, G, 4)`` of ``pert`` ``(C, P)``; ``None`` when ``effect_prior`` is off."""
        if not self.config["effect_prior"]:
            return None
        valid = pert >= 0
        known = valid & self.has_effect[pert.clamp_min(0)]
        if self.training and self.flow["prior_dropout"] > 0:
            known = known & (torch.rand(known.shape, device=known.device) >= self.flow["prior_dropout"])
        d = self.single_effect[pert.clamp_min(0)] * known[..., None]  # (C, P, G)
        mean = self._prior_mean(d, known, valid, pert)
        if genes is not None:
            d, mean = d[..., genes], mean[..., genes]
        counts = torch.stack([known.sum(-1), valid.sum(-1)], -1).to(d.dtype) / pert.shape[-1]  # (C, 2)
        prod = d.prod(1) if d.shape[1] > 1 else torch.zeros_like(d[:, 0])
        feats = torch.stack([mean, prod], -1)
        return torch.cat([feats, counts[:, None].expand(-1, d.shape[-1], -1)], -1)

    def velocity(self, x: Tensor, t: Tensor, x_ctrl: Tensor, pert: Tensor, genes: Tensor | None = None,
                 prior: Tensor | None = None, context: dict | None = None) -> Tensor:
        """``v_θ`` for ``x``, ``x_ctrl`` ``(C, N, G)``, ``t`` ``(C, N)``, ``pert`` ``(C, P)`` → ``(C, N, G)``.

        ``prior``: effect-prior channels ``(C, G, k)`` from :meth:`prior` (computed here when ``None``). With
        ``flow.max_genes = K < G`` and no explicit ``genes``, the genes are split into ``⌈G/K⌉`` strided chunks
        evaluated separately (the gene-subset sizes seen in training; attention cost ``G·K`` instead of ``G²``).
        ``context``: :meth:`context` of ``x_ctrl, pert`` (what does not change across ODE steps), precomputed.
        """
        context = self.context(x_ctrl, pert, genes, prior) if context is None else context
        if "chunks" in context:  # evaluation on a gene subset size seen in training: strided chunks
            out = torch.empty_like(x)
            for idx, sub in context["chunks"]:
                out[..., idx] = self.velocity(x[..., idx], t, x_ctrl[..., idx], pert, idx, context=sub)
            return out
        c, n, g = x.shape
        v = self.net(x.reshape(c * n, g), t.reshape(-1), context=context["net"]).view(c, n, g)
        if context["shift"] is not None:
            w = 0.0 if self.flow["additive_fallback"] and not self.training else float(self.flow["remainder_mean"])
            if w != 1.0:  # shrink the mean remainder where the prior is complete (all perturbed singles known)
                v = torch.where(context["full"], v - (1.0 - w) * v.mean(1, keepdim=True), v)
            v = v + context["shift"]  # start from the prior mean (additive or combination); network: the rest
        return v

    def context(self, x_ctrl: Tensor, pert: Tensor, genes: Tensor | None = None, prior: Tensor | None = None) -> dict:
        """What :meth:`velocity` needs besides ``x`` and ``t`` (constant across ODE steps).

        Network context (control tokens, their keys and values, perturbation embedding, mask), the prior mean
        added to the velocity (``shift`` ``(C, 1, G)``) and where the remainder mean is removed (``full``
        ``(C, 1, 1)``); per gene chunk under ``max_genes``.
        """
        c, n, g = x_ctrl.shape
        prior = self.prior(pert, genes) if prior is None else prior
        k = self.flow["max_genes"]
        if genes is None and k and g > k:
            n_chunks = -(-g // k)
            chunks = []
            for i in range(n_chunks):
                idx = torch.arange(i, g, n_chunks, device=x_ctrl.device)
                sub = None if prior is None else prior[:, idx]
                chunks.append((idx, self.context(x_ctrl[..., idx], pert, idx, sub)))
            return {"chunks": chunks}
        ctrl_mean = x_ctrl.mean(1, keepdim=True).expand_as(x_ctrl)
        p = pert[:, None].expand(c, n, pert.shape[-1]).reshape(c * n, -1)
        per_cell = None if prior is None else prior[:, None].expand(c, n, g, prior.shape[-1]).reshape(c * n, g, -1)
        net = self.net.encode_context(x_ctrl.reshape(c * n, g), ctrl_mean.reshape(c * n, g), p, genes, per_cell)
        out = {"net": net, "shift": None, "full": None}
        if prior is not None and self.flow["additive_skip"] and self.flow["path"] == "control":
            out["full"] = (prior[:, 0, 2] == prior[:, 0, 3])[:, None, None]
            out["shift"] = prior[:, None, :, 0]
            if self.flow["additive_fallback"] and not self.training:  # every condition: mean = additive prior
                out["full"] = torch.ones_like(out["full"])
                out["shift"] = self.prior_mean(pert, genes)[:, None]
        return out

    @torch.no_grad()
    def sample(self, x_ctrl: Tensor, pert: Tensor, steps: int | None = None, method: str | None = None,
               generator: torch.Generator | None = None, x0: Tensor | None = None,
               ctrl_mean: Tensor | None = None) -> Tensor:
        """One generated cell per control cell: ``x_ctrl`` ``(C, N, G)``, ``pert`` ``(C, P)`` → ``(C, N, G)``.

        ``x0``: start of the ODE (default: the path's start drawn with ``generator``). What does not change across
        steps (:meth:`context`) is computed once. With ``flow.nonnegative`` the result is projected onto ``x ≥ 0``.
        Under ``flow.additive_fallback`` (eval mode) the cells are projected instead onto the nearest population
        (``x ≥ 0`` under ``nonnegative``) whose mean is exactly ``ctrl_mean + prior_mean(pert)`` (clipped at 0);
        under ``flow.exact_mean`` so are the conditions whose singles are all known:
        ``ctrl_mean`` ``(G,)`` or ``(C, G)`` is the mean of the whole control population the cells were drawn from
        (default: of ``x_ctrl``), so the mean effect equals the additive baseline's.
        """
        x0 = self.path.initial(x_ctrl, generator) if x0 is None else x0
        context = self.context(x_ctrl, pert)

        def field(x: Tensor, t: Tensor) -> Tensor:
            return self.velocity(x, t.expand(x.shape[:2]), x_ctrl, pert, context=context)

        x = integrate(field, x0, steps or self.flow["steps"], method or self.flow["method"])
        clipped = x.clamp_min(0.0) if self.flow["nonnegative"] else x
        if self.training or not (self.flow["additive_fallback"] or self.flow["exact_mean"]):
            return clipped
        base = x_ctrl.mean(1) if ctrl_mean is None else ctrl_mean.to(x)
        exact = project_mean(x, base + self.prior_mean(pert), bool(self.flow["nonnegative"]))
        if self.flow["additive_fallback"]:
            return exact
        valid = pert >= 0
        full = (valid == (valid & self.has_effect[pert.clamp_min(0)])).all(-1)  # every single known
        return torch.where(full[:, None, None], exact, clipped)

    def predict_step(self, batch: dict, batch_idx: int = 0) -> Prediction:
        """Mean effect ``Δ̂ = mean(generated) − mean(control)`` ``(C, G)``; generated cells in ``meta["cells"]``."""
        cells = self.sample(batch["x_ctrl"], batch["pert_genes"])
        effect = cells.mean(1) - batch["x_ctrl"].mean(1)
        return Prediction(mean=effect, meta={"cells": cells, "conditions": list(batch["condition"]),
                                              "genes": self.measured_genes, "unit": "log1p expression"})

    @property
    def measured_genes(self) -> list[str]:
        """Names of the expression columns ``G`` (the first ``n_measured`` vocabulary entries)."""
        genes = list(self.config["genes"])
        return genes[: self.config["n_measured"] or len(genes)]


def _mean_single(single_effect: Tensor, has_effect: Tensor) -> Tensor:
    """Mean ``(G,)`` of the measured single effects (zeros when none)."""
    return single_effect[has_effect].mean(0) if bool(has_effect.any()) else torch.zeros_like(single_effect[0])


def _default_buffers(module, state_dict, prefix, *args) -> None:
    """Load hook for states saved before a buffer existed: what the older model used.

    ``unknown_effect``: the mean single effect; ``closure`` (masking prior): zeros (``flow.closure`` was off);
    ``joint_effect``, ``joint_var``: the measured singles (no ``eb_joint`` then).
    """
    key = prefix + "unknown_effect"
    if key not in state_dict and prefix + "single_effect" in state_dict and prefix + "has_effect" in state_dict:
        state_dict[key] = _mean_single(state_dict[prefix + "single_effect"], state_dict[prefix + "has_effect"])
    if hasattr(module, "closure") and prefix + "closure" not in state_dict and prefix + "single_var" in state_dict:
        state_dict[prefix + "closure"] = torch.zeros_like(module.closure)
    for joint, single in (("joint_effect", "single_effect"), ("joint_var", "single_var")):
        if hasattr(module, joint) and prefix + joint not in state_dict and prefix + single in state_dict:
            state_dict[prefix + joint] = state_dict[prefix + single].clone()
