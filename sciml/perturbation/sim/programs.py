r"""A second simulator of perturbation screens, by another law than the regulatory network: saturating gene programs.

The GRN simulator (:mod:`sciml.perturbation.sim.simulate`) relaxes a network of Hill-function regulators. This one
has no network: ``K`` latent gene programs, each gene loading on a few of them, and a perturbation moves program
activities. A cell of condition ``c`` with perturbation efficiency ``e`` and program noise ``ε ~ N(0, σ_ε² I_K)``
has expected expression

.. math::

    \log r_g = \mu_g + \sum_k W_{gk}\, S\tanh\!\big((e\,s_{c,k} + ε_k) / S\big) + \log(1 - e\,\kappa)\,[g \in c],

with ``s_c = a_p`` for a single ``p``, ``s_{ab} = a_a + a_b + γ_{ab}\, a_a \odot a_b`` for a double (``γ_ab`` a
per-pair synergy, positive or negative) and ``κ`` the knockdown of a perturbed gene's own expression. Saturation
(``tanh``) and the program-level synergy make doubles non-additive in gene space in a way the GRN's AND/OR terms do
not. Counts are gamma-Poisson (negative binomial, dispersion ``θ``) around ``r_g / Σ r · L`` with a log-normal
library ``L``; ``X = log1p(counts / Σ counts · target_sum)``. Used to check a recipe on a screen it was not tuned on
(``benchmarks/perturbation_scale.py --simulator programs``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy import sparse

from sciml.perturbation.data.anndata_io import TARGET_SUM, log_normalise
from sciml.perturbation.data.conditions import format_condition
from sciml.perturbation.progress import note
from sciml.perturbation.sim.simulate import gene_names, typed_config


@dataclass
class ProgramConfig:
    """Settings of a program screen (all seeded by ``seed``)."""

    seed: int = 0
    n_genes: int = 100
    n_programs: int = 0  # K; 0: max(8, n_genes // 50)
    loadings_per_gene: int = 3
    loading_sd: float = 0.5
    n_singles: int = 20
    n_doubles: int = 30
    effect_sd: float = 1.2  # sd of a perturbation's program shifts (two programs per perturbed gene)
    synergy_sd: float = 0.6  # sd of γ_ab
    saturation: float = 1.5  # S
    program_noise: float = 0.3  # σ_ε
    efficiency: float = 0.85  # mean of the Beta-distributed e
    own_knockdown: float = 0.9  # κ
    cells_per_condition: int = 200
    control_cells: int = 600
    depth: float = 3000.0  # mean library size
    library_sd: float = 0.3
    dispersion: float = 5.0  # θ
    target_sum: float = TARGET_SUM

    @classmethod
    def from_dict(cls, data: dict | None) -> ProgramConfig:
        """Build from a mapping; unknown keys are a ``ValueError`` naming them."""
        cfg = typed_config(cls, dict(data or {}), "program screen", "numbers for every setting")
        if cfg.n_singles > cfg.n_genes or cfg.n_doubles > cfg.n_singles * (cfg.n_singles - 1) // 2:
            raise ValueError(f"program screen: {cfg.n_singles} singles and {cfg.n_doubles} doubles do not fit "
                             f"{cfg.n_genes} genes (doubles are pairs of the singles)")
        return cfg


def _design(cfg: ProgramConfig, rng: np.random.Generator) -> dict:
    """Programs, loadings ``W`` ``(G, K)``, base log-rates ``μ`` ``(G,)``, conditions and their activities."""
    g, k = cfg.n_genes, cfg.n_programs or max(8, cfg.n_genes // 50)
    w = np.zeros((g, k))
    for gene in range(g):
        w[gene, rng.choice(k, min(cfg.loadings_per_gene, k), replace=False)] = rng.normal(0, cfg.loading_sd,
                                                                                         min(cfg.loadings_per_gene, k))
    mu = rng.normal(0.0, 1.0, g)
    singles = np.sort(rng.choice(g, cfg.n_singles, replace=False))
    shift = np.zeros((cfg.n_singles, k))
    for i in range(cfg.n_singles):
        shift[i, rng.choice(k, min(2, k), replace=False)] = rng.normal(0, cfg.effect_sd, min(2, k))
    pairs = [(a, b) for a in range(cfg.n_singles) for b in range(a + 1, cfg.n_singles)]
    doubles = [pairs[i] for i in np.sort(rng.choice(len(pairs), cfg.n_doubles, replace=False))]
    conds = [()] + [(int(singles[i]),) for i in range(cfg.n_singles)]
    activity = [np.zeros(k)] + list(shift)
    for a, b in doubles:
        conds.append((int(singles[a]), int(singles[b])))
        activity.append(shift[a] + shift[b] + rng.normal(0, cfg.synergy_sd) * shift[a] * shift[b])
    return {"w": w, "mu": mu, "conds": conds, "activity": np.stack(activity)}


def _cells(design: dict, c: int, n: int, cfg: ProgramConfig, rng: np.random.Generator) -> sparse.csr_matrix:
    """Counts ``(n, G)`` (CSR, int32) of ``n`` cells of condition ``c`` (module docstring)."""
    perturbed = len(design["conds"][c]) > 0
    conc = 20.0
    e = rng.beta(conc * cfg.efficiency, conc * (1 - cfg.efficiency), n)[:, None] if perturbed else np.zeros((n, 1))
    noise = rng.normal(0.0, cfg.program_noise, (n, design["w"].shape[1]))
    programs = cfg.saturation * np.tanh((e * design["activity"][c] + noise) / cfg.saturation)
    log_rate = design["mu"] + programs @ design["w"].T
    if perturbed:
        own = list(design["conds"][c])
        log_rate[:, own] += np.log1p(-e * cfg.own_knockdown)
    rate = np.exp(log_rate - log_rate.max(1, keepdims=True))
    library = cfg.depth * np.exp(rng.normal(-cfg.library_sd**2 / 2, cfg.library_sd, (n, 1)))
    mean = rate / rate.sum(1, keepdims=True) * library
    counts = rng.poisson(rng.gamma(cfg.dispersion, mean / cfg.dispersion))
    return sparse.csr_matrix(counts.astype(np.int32))


def simulate_programs(cfg: ProgramConfig | dict | None = None):
    """A program screen as AnnData.

    ``obs['condition']`` (GEARS labels, controls ``ctrl``), ``layers['counts']`` and ``X`` (CSR), and
    ``uns['programs']``: ``config``, ``conditions``, ``doubles``, ``loadings`` ``(G, K)``, ``activity``
    ``(conditions, K)``.
    """
    import anndata as ad
    import pandas as pd

    cfg = cfg if isinstance(cfg, ProgramConfig) else ProgramConfig.from_dict(cfg)
    rng = np.random.default_rng(cfg.seed)
    design = _design(cfg, rng)
    genes = gene_names(cfg.n_genes)
    labels = [format_condition([genes[g] for g in c]) for c in design["conds"]]
    sizes = [cfg.control_cells] + [cfg.cells_per_condition] * (len(labels) - 1)
    blocks = []
    for c, n in enumerate(sizes):
        blocks.append(_cells(design, c, n, cfg, rng))
        if (c + 1) % 50 == 0:
            note(f"simulated {c + 1}/{len(sizes)} conditions ({cfg.n_genes} genes, programs)")
    counts = sparse.vstack(blocks, format="csr")
    cond = np.repeat(np.arange(len(labels)), sizes)
    obs = pd.DataFrame({"condition": pd.Categorical([labels[i] for i in cond], categories=labels)},
                       index=[f"cell{i}" for i in range(len(cond))])
    adata = ad.AnnData(X=log_normalise(counts.astype(np.float32), cfg.target_sum), obs=obs,
                       var=pd.DataFrame(index=genes), layers={"counts": counts})
    adata.uns["programs"] = {"config": asdict(cfg), "conditions": labels,
                             "doubles": [lab for lab, c in zip(labels, design["conds"], strict=True) if len(c) == 2],
                             "loadings": design["w"].astype(np.float32),
                             "activity": design["activity"].astype(np.float32)}
    return adata
