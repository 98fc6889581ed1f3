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
from sciml.perturbation.nn import PATHS, PADTransformer, integrate, project_mean
from sciml.perturbation.nn.combination import CombinationRule
from sciml.perturbation.prior import (
    PriorTables,
    Singles,
    condition_singles,
    mean_single,
    move_rows,
    n_table_rows,
    prior_mean,
    shrunk_table,
    table_rows,
)
from sciml.perturbation.progress import note
from sciml.perturbation.schema import SCHEMA
from sciml.perturbation.settings import PRIOR_FIELDS, PriorSettings

#: ``model.flow`` defaults (the prior's from :class:`~sciml.perturbation.settings.PriorSettings`), from the schema
FLOW_DEFAULTS = {name: key.default for name, key in SCHEMA["model"].keys["flow"].keys.items()}
OPTIM_DEFAULTS = {name: key.default for name, key in SCHEMA["model"].keys["optim"].keys.items()}
PRIOR_CHANNELS = 4


AUTO_MAX_GENES = 256  # flow.max_genes auto: genes per training step and attention chunk on panels wider than this
AUTO_PREDICT_GENES = 128  # flow.predict_genes auto: genes the network generates per condition on wider panels
WIDE_TABLE = 100_000  # singles table entries (perturbations x genes) from which the shrinkage prints progress


def chunk_size(max_genes: int | str | None, n_genes: int, auto: int = AUTO_MAX_GENES) -> int | None:
    """``flow.max_genes`` (or ``flow.predict_genes`` with ``auto=AUTO_PREDICT_GENES``) for a panel of ``n_genes``.

    ``None`` means all genes at once. ``auto`` is ``None`` up to ``auto`` genes, else ``auto``: attention never
    spans a wide panel at once (training steps on that many random genes, evaluation in strided chunks of that
    size: cost and memory linear in the genes), and prediction runs the network on that many genes per condition
    (``docs/benchmarks.md``: as accurate as the whole panel on two simulated screens, at a fraction of the cost).
    """
    if max_genes == "auto":
        return auto if n_genes > auto else None
    return None if max_genes is None else int(max_genes)


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
        ``model.flow`` over :data:`FLOW_DEFAULTS`: ``path`` (``control`` or ``noise``), ``sigma``, ``ot`` (minibatch-OT
        pairing of the control path), ``mmd_weight`` λ, ``mmd_scales``, sampling ``steps``/``method``, ``val_steps``
        (Euler steps of the validation metric), ``max_genes`` (random gene subset per training step and strided
        chunks at evaluation, ``None``: all; ``auto``: :func:`chunk_size`),
        ``combination_hidden`` (width of the combination rule), ``nonnegative`` (generated cells projected onto
        ``x ≥ 0`` after the last ODE step), and the prior's keys, held as :attr:`prior_settings`.
    optim : dict
        Over :data:`OPTIM_DEFAULTS`: ``lr``, ``weight_decay``, ``scheduler`` (``cosine`` or ``none``); used by
        training only.
    effect_prior : bool
        Condition the control tokens on the measured mean effects of the perturbed genes' singles in the
        training split (buffers ``single_effect`` ``(R, G)``, ``has_effect`` ``(V,)``, set by :meth:`set_singles`;
        ``R − 1`` = the genes perturbed in training, row ``rows[v]`` for vocabulary entry ``v``, :class:`Singles`):
        per gene the prior mean (:func:`sciml.perturbation.prior.prior_mean`), ``Δ_a·Δ_b`` and the counts of known
        and perturbed genes; unknown singles (held-out genes) enter as zeros. During training each known effect is
        hidden with probability ``prior_dropout``. With the control path and ``additive_skip`` the prior mean is
        added to the velocity, so the untrained model is the prior and the network learns the remainder.

    Notes
    -----
    The prior (:class:`~sciml.perturbation.settings.PriorSettings`) reads tables held as buffers: the singles'
    squared standard errors ``single_var``, the singles fitted with the training doubles ``joint_effect``,
    ``joint_var`` (``denoise: eb_joint``) and the ``closure`` terms (masking prior); the combination rule
    ``combination.*`` with the control mean ``ctrl_mean`` (``prior: combination``, or ``blend < 1``), fitted by
    :meth:`fit_combination` and frozen; the stand-in effect of a single never measured ``unknown_effect`` (under
    ``additive_fallback``). ``remainder_mean`` ``w`` shrinks the network's per-condition mean velocity to ``w`` times
    itself where every single is known; under ``additive_fallback`` (eval mode) or ``exact_mean`` :meth:`sample`
    moves the cells to the nearest population (``x ≥ 0`` under ``nonnegative``) whose mean is exactly the control
    mean plus the prior mean, clipped at 0 (:func:`~sciml.perturbation.nn.project_mean`).

    Attributes
    ----------
    config : dict
        The constructor's arguments (an artifact's ``module`` section); :meth:`set_prior` and :meth:`set_flow`
        update ``flow``.
    prior_settings : PriorSettings
        The prior (checked when the model is made).

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
        index = {g: i for i, g in enumerate(genes)}
        rows = table_rows([index[g] for g in perturbed_genes] if perturbed_genes is not None else range(len(genes)),
                          len(genes))
        self.register_buffer("rows", rows)  # vocabulary entry -> row of the singles' tables (Singles)
        n_rows = n_table_rows(rows)
        self.register_buffer("single_effect", torch.zeros(n_rows, n_measured))
        self.register_buffer("has_effect", torch.zeros(len(genes), dtype=torch.bool))
        self.register_buffer("unknown_effect", torch.zeros(n_measured))  # additive fallback's stand-in single
        self.register_load_state_dict_pre_hook(_default_buffers)
        self.register_load_state_dict_post_hook(lambda module, keys: module._forget_shrunk())
        self._shrunk: Tensor | None = None  # denoise "eb"/"eb_single"/"eb_joint": the shrunk singles, when needed
        self.prior_settings = PriorSettings.from_flow(flow)
        self.flow = {k: v for k, v in (FLOW_DEFAULTS | (flow or {})).items() if k not in PRIOR_FIELDS}
        self.flow["max_genes"] = chunk_size(self.flow["max_genes"], n_measured)
        self.flow["predict_genes"] = chunk_size(self.flow["predict_genes"], n_measured, AUTO_PREDICT_GENES)
        self.optim = OPTIM_DEFAULTS | (optim or {})
        settings = self.prior_settings
        self.combination = None
        if settings.uses_rule:
            self.combination = CombinationRule(int(self.flow["combination_hidden"])).requires_grad_(False)
            self.register_buffer("ctrl_mean", torch.zeros(n_measured))  # μ_0 feature of the rule
        if settings.prior == "masking":
            self.register_buffer("single_var", torch.zeros(n_rows, n_measured))  # squared s.e. of single_effect
            self.register_buffer("joint_effect", torch.zeros(n_rows, n_measured))  # denoise: eb_joint
            self.register_buffer("joint_var", torch.zeros(n_rows, n_measured))
            self.register_buffer("closure", torch.zeros(2, n_measured))  # μ0 and weights of nn.masking.close
        if self.flow["path"] not in PATHS:
            raise ValueError(f"flow.path is {self.flow['path']!r}; known: {sorted(PATHS)}")
        kwargs = {"ot": bool(self.flow["ot"])} if self.flow["path"] == "control" else {}
        self.path = PATHS[self.flow["path"]](sigma=self.flow["sigma"], **kwargs)

    def set_single_effects(self, effects: dict[int, Tensor], variances: dict[int, Tensor] | None = None) -> None:
        """Store measured single effects ``{vocabulary index: Δ (G,)}`` and their squared standard errors."""
        self.set_singles(Singles.from_measured(effects, variances, len(self.rows), self.single_effect.shape[1],
                                               self.rows))

    def set_singles(self, singles: Singles) -> None:
        """Store the training singles (effects; variances under ``prior: masking``); the stand-in is their mean.

        Every measured single must be of a gene perturbed in training (a row of :attr:`rows`).
        """
        singles = self._in_layout(singles)
        self.single_effect.copy_(singles.effect)
        self.has_effect.copy_(singles.known)
        if hasattr(self, "single_var"):
            self.single_var.copy_(singles.var)
            self.joint_effect.copy_(self.single_effect)
            self.joint_var.copy_(self.single_var)
        self.unknown_effect.copy_(singles.mean_effect())
        self._forget_shrunk()

    def set_joint_singles(self, joint: Singles) -> None:
        """Store the singles estimated with the training doubles (``denoise: eb_joint``).

        :func:`sciml.perturbation.select.fit_joint` computes them.
        """
        if not hasattr(self, "joint_effect"):
            raise ValueError("joint singles are used by flow.denoise: eb_joint, which needs flow.prior: masking")
        joint = self._in_layout(joint)
        self.joint_effect.copy_(joint.effect)
        self.joint_var.copy_(joint.var)
        self._forget_shrunk()

    def _in_layout(self, singles: Singles) -> Singles:
        """``singles`` in this model's table layout (:attr:`rows`)."""
        rows = self.rows.to(singles.rows.device)
        return singles if torch.equal(singles.rows, rows) else singles.relayout(rows)

    def singles(self, joint: bool = False) -> Singles:
        """The stored singles (``joint``: those fitted with the training doubles) as :class:`Singles`."""
        effect, var = ((self.joint_effect, self.joint_var) if joint else
                       (self.single_effect, getattr(self, "single_var", torch.zeros_like(self.single_effect))))
        return Singles(effect, var, self.has_effect, self.rows)

    def _forget_shrunk(self) -> None:
        self._shrunk = None

    def shrunk_singles(self) -> Tensor:
        """Single effects ``(R, G)`` (rows: :attr:`rows`) after empirical-Bayes shrinkage (``denoise``)."""
        if self._shrunk is None or self._shrunk.device != self.single_effect.device:
            denoise = self.prior_settings.denoise
            joint = denoise == "eb_joint"
            effect, var = (self.joint_effect, self.joint_var) if joint else (self.single_effect, self.single_var)
            wide = effect.numel() >= WIDE_TABLE  # seconds to a minute on CPU: say so rather than stay silent
            if wide:
                note(f"shrinking the single effects ({int(self.has_effect.sum())} perturbations x {effect.shape[1]} "
                     f"genes, {denoise})")
            self._shrunk = shrunk_table(effect, var, self.has_effect, self.rows, denoise)
            if wide:
                note("single effects shrunk")
        return self._shrunk

    def set_closure(self, terms: Tensor | None) -> None:
        """Turn ``closure`` on with :func:`~sciml.perturbation.nn.masking.closure_terms` ``(2, G)``; ``None``: off."""
        if terms is not None and not hasattr(self, "closure"):
            raise ValueError("flow.closure needs flow.prior: masking")
        if hasattr(self, "closure"):
            self.closure.copy_(torch.zeros_like(self.closure) if terms is None else terms.to(self.closure))
        self.set_prior(closure=terms is not None)

    def set_unknown_effect(self, delta: Tensor) -> None:
        """Stand-in effect ``(G,)`` of a single never measured in training (used under ``additive_fallback``)."""
        self.unknown_effect.copy_(torch.as_tensor(delta, dtype=self.unknown_effect.dtype))

    def fit_combination(self, doubles: list[tuple[int, int, Tensor]], ctrl_mean: Tensor, seed: int = 0) -> float | None:
        """Fit the frozen combination rule on training doubles ``(index a, index b, Δ_ab (G,))``; ``ctrl_mean`` (G,).

        Needs the singles first; doubles with an unknown single are skipped. Returns the fit MSE (``None`` without
        a rule or usable doubles).
        """
        if self.combination is None:
            return None
        self.ctrl_mean.copy_(torch.as_tensor(ctrl_mean, dtype=self.ctrl_mean.dtype))
        rows = [(a, b, d) for a, b, d in doubles if bool(self.has_effect[a]) and bool(self.has_effect[b])]
        if not rows:
            return None
        da = self.single_effect[self.rows[[a for a, _, _ in rows]]]
        db = self.single_effect[self.rows[[b for _, b, _ in rows]]]
        target = torch.stack([torch.as_tensor(d, dtype=da.dtype) for _, _, d in rows])
        mse = self.combination.requires_grad_(True).fit(da, db, self.ctrl_mean, target, seed=seed)
        self.combination.requires_grad_(False)
        return mse

    def set_prior(self, settings: PriorSettings | None = None, **changes) -> None:
        """Replace the prior settings (``settings``, or the current ones with ``changes``); saved with the config.

        The kind of prior and whether it reads a combination rule are fixed when the model is made (its buffers
        and parameters depend on them).
        """
        new = (settings or self.prior_settings).replace(**changes)
        old = self.prior_settings
        if new.prior != old.prior or (new.uses_rule and self.combination is None):
            raise ValueError(f"flow.prior {new.prior!r} (blend {new.blend:g}) needs another model than this one, "
                             f"made with flow.prior {old.prior!r} (blend {old.blend:g}); build a new model")
        if new.denoise != old.denoise:
            self._forget_shrunk()
        self.prior_settings = new
        self.config["flow"] = dict(self.config.get("flow") or {}) | new.to_flow()

    def set_flow(self, **values) -> None:
        """Change sampling settings of ``flow`` after construction (the prior's: :meth:`set_prior`)."""
        prior = sorted(set(values) & set(PRIOR_FIELDS))
        if prior:
            raise ValueError(f"flow keys {prior} are prior settings; change them with set_prior")
        self.flow |= values
        if "predict_genes" in values:  # "auto" resolved for this panel, as at construction
            self.flow["predict_genes"] = chunk_size(values["predict_genes"], self.single_effect.shape[1],
                                                    AUTO_PREDICT_GENES)
        self.config["flow"] = dict(self.config.get("flow") or {}) | values

    def prior_tables(self) -> PriorTables:
        """What :func:`~sciml.perturbation.prior.prior_mean` reads besides the singles, from the buffers."""
        s = self.prior_settings
        masking = s.prior == "masking"
        return PriorTables(var=self.single_var if masking else None,
                           shrunk=self.shrunk_singles() if masking and s.empirical_bayes and not s.additive_fallback
                           else None,
                           rule=self._rule if self.combination is not None else None,
                           closure=self.closure if masking else None, rows=self.rows)

    def _rule(self, da: Tensor, db: Tensor) -> Tensor:
        return self.combination(da, db, self.ctrl_mean)

    def prior_mean(self, pert: Tensor, genes: Tensor | None = None) -> Tensor:
        """Mean effect ``(C, G)`` the prior assigns to ``pert`` ``(C, P)`` (the pure ``prior_mean``).

        No dropout; it is the generated mean under ``remainder_mean: 0``; under ``additive_fallback`` an unknown
        single counts as ``unknown_effect``.
        """
        stand_in = self.unknown_effect if self.prior_settings.additive_fallback else None
        d, known = condition_singles(pert, self.single_effect, self.has_effect, self.rows, stand_in)
        mean = prior_mean(d, known, pert, self.prior_settings, self.prior_tables())
        return mean if genes is None else mean[..., genes]

    def prior(self, pert: Tensor, genes: Tensor | None = None) -> Tensor | None:
        """Effect-prior channels ``(C, G, 4)`` of ``pert`` ``(C, P)``; ``None`` when ``effect_prior`` is off."""
        if not self.config["effect_prior"]:
            return None
        valid = pert >= 0
        known = valid & self.has_effect[pert.clamp_min(0)]
        dropout = self.prior_settings.prior_dropout
        if self.training and dropout > 0:
            known = known & (torch.rand(known.shape, device=known.device) >= dropout)
        d = self.single_effect[self.rows[pert.clamp_min(0)]] * known[..., None]  # (C, P, G)
        mean = prior_mean(d, known, pert, self.prior_settings, self.prior_tables())
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
            fallback = self.prior_settings.additive_fallback
            w = 0.0 if fallback and not self.training else self.prior_settings.remainder_mean
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
        out = {"net": net, "shift": self.shift(pert, prior, genes), "full": None}
        if out["shift"] is not None:
            out["full"] = (prior[:, 0, 2] == prior[:, 0, 3])[:, None, None]
            if self.prior_settings.additive_fallback and not self.training:  # every condition: mean = additive
                out["full"] = torch.ones_like(out["full"])
        return out

    @property
    def starts_from_prior(self) -> bool:
        """Whether the velocity starts from the prior mean (:meth:`shift`): effect prior, additive skip, control."""
        settings = self.prior_settings
        return bool(self.config["effect_prior"]) and settings.additive_skip and self.flow["path"] == "control"

    def shift(self, pert: Tensor, prior: Tensor | None, genes: Tensor | None = None) -> Tensor | None:
        """Prior mean ``(C, 1, G)`` the velocity starts from (``None``: the network gives the whole velocity).

        ``prior``: :meth:`prior` of ``pert`` ``(C, P)`` on ``genes``. Set under ``additive_skip`` on the control path;
        under ``additive_fallback`` (eval mode) it is :meth:`prior_mean` for every condition.
        """
        if prior is None or not self.starts_from_prior:
            return None
        if self.prior_settings.additive_fallback and not self.training:
            return self.prior_mean(pert, genes)[:, None]
        return prior[:, None, :, 0]

    def focus(self, pert: Tensor) -> Tensor | None:
        """Genes ``(C, K)`` the network generates at prediction: each condition's ``K`` largest ``|prior mean|``.

        ``K`` is ``flow.predict_genes`` (resolved); ``None`` (every gene) in training, on panels of at most ``K``
        genes, or without a prior mean to start the velocity from (:meth:`shift`).
        """
        k, g = self.flow.get("predict_genes"), self.single_effect.shape[1]
        if self.training or not k or g <= k or not self.starts_from_prior:
            return None
        return self.prior_mean(pert).abs().topk(int(k), -1).indices.sort(-1).values

    def _integrate(self, x0: Tensor, x_ctrl: Tensor, pert: Tensor, steps: int, method: str,
                   genes: Tensor | None = None) -> Tensor:
        """The flow from ``x0`` ``(C, N, G)``; with ``genes`` ``(K,)`` (one condition) on those genes only.

        Outside ``genes`` the network's remainder is taken as zero, so the velocity is the prior mean (:meth:`shift`)
        and the straight path ends at ``x0 + shift``.
        """
        sub_ctrl = x_ctrl if genes is None else x_ctrl[..., genes]
        context = self.context(sub_ctrl, pert, genes)

        def field(x: Tensor, t: Tensor) -> Tensor:
            return self.velocity(x, t.expand(x.shape[:2]), sub_ctrl, pert, genes, context=context)

        if genes is None:
            return integrate(field, x0, steps, method)
        x = x0 + self.shift(pert, self.prior(pert))
        x[..., genes] = integrate(field, x0[..., genes], steps, method)
        return x

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
        steps, method = steps or self.flow["steps"], method or self.flow["method"]
        focus = self.focus(pert)
        if focus is None:
            x = self._integrate(x0, x_ctrl, pert, steps, method)
        else:
            x = torch.cat([self._integrate(x0[c:c + 1], x_ctrl[c:c + 1], pert[c:c + 1], steps, method, focus[c])
                           for c in range(len(pert))])
        clipped = x.clamp_min(0.0) if self.flow["nonnegative"] else x
        fallback, exact_mean = self.prior_settings.additive_fallback, self.prior_settings.exact_mean
        if self.training or not (fallback or exact_mean):
            return clipped
        base = x_ctrl.mean(1) if ctrl_mean is None else ctrl_mean.to(x)
        exact = project_mean(x, base + self.prior_mean(pert), bool(self.flow["nonnegative"]))
        if fallback:
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


def _default_buffers(module, state_dict, prefix, *args) -> None:
    """Load hook for states saved before a buffer existed: what the older model used.

    ``unknown_effect``: the mean single effect; ``closure`` (masking prior): zeros (``flow.closure`` was off);
    ``joint_effect``, ``joint_var``: the measured singles (no ``eb_joint`` then). A state without ``rows`` holds
    its singles' tables by vocabulary entry ``(V, G)``: they are moved to this model's compact rows.
    """
    effect, known = state_dict.get(prefix + "single_effect"), state_dict.get(prefix + "has_effect")
    key = prefix + "unknown_effect"
    if key not in state_dict and effect is not None and known is not None:
        rows = state_dict.get(prefix + "rows")  # absent: tables by vocabulary entry
        state_dict[key] = mean_single(effect, known, torch.arange(len(known)) if rows is None else rows)
    if hasattr(module, "closure") and prefix + "closure" not in state_dict and prefix + "single_var" in state_dict:
        state_dict[prefix + "closure"] = torch.zeros_like(module.closure)
    for joint, single in (("joint_effect", "single_effect"), ("joint_var", "single_var")):
        if hasattr(module, joint) and prefix + joint not in state_dict and prefix + single in state_dict:
            state_dict[prefix + joint] = state_dict[prefix + single].clone()
    if prefix + "rows" not in state_dict and effect is not None and known is not None:
        _compact_tables(module, state_dict, prefix, known)


def _compact_tables(module, state_dict, prefix: str, known: Tensor) -> None:
    """Move the ``(V, G)`` singles' tables of an older state to the model's rows (:func:`move_rows`)."""
    by_entry = torch.arange(len(known), device=known.device)
    for name in ("single_effect", "single_var", "joint_effect", "joint_var"):
        table = state_dict.get(prefix + name)
        if table is not None and hasattr(module, name):
            state_dict[prefix + name] = move_rows(table, known, by_entry, module.rows.to(table.device))
    state_dict[prefix + "rows"] = module.rows.clone()
