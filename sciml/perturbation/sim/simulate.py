"""Simulated perturbation screens with ground truth (``sciml data grn``).

A random :class:`~sciml.perturbation.sim.grn.GRN` is perturbed gene by gene and in pairs; each cell gets its own
perturbation efficiency and cell scale, relaxes by chemical Langevin steps, and is read out as negative-binomial
counts with a log-normal library size; ``X = log1p(counts / library · target_sum)``
(:func:`sciml.perturbation.data.anndata_io.log_normalise`).

Ground truth stored in ``uns['grn']``: the noise-free condition means in the same log1p space (steady state at the
mean efficiency, no counting noise), the network, and the interaction vector of each double
``ε_ab = μ_ab − μ_a − μ_b + μ_ctrl``. The noise floor of a double is the expected norm of the error of ε estimated
from its real cells, ``sqrt(Σ_g Σ_c var_cg / n_c)`` over the four conditions c ∈ {ab, a, b, ctrl}.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, fields

import numpy as np

from sciml.perturbation.data.anndata_io import TARGET_SUM, log_normalise
from sciml.perturbation.data.conditions import format_condition
from sciml.perturbation.progress import note
from sciml.perturbation.sim.grn import GRN, random_grn
from sciml.perturbation.sim.kernels import negative_binomial

PERTURBATION_TYPES = ("knockdown", "knockout", "activation")
ENGINES = ("auto", "numpy", "torch", "compiled")
WIDE = 1000  # genes from which ``engine: auto`` steps compiled and ``sparse: auto`` writes CSR
CHUNK = 512  # cells whose counts are drawn at once by the compiled engine


@dataclass
class SimConfig:
    """Simulator settings (all seeded by ``seed``); the defaults run in seconds on one core."""

    seed: int = 0
    n_genes: int = 100
    n_masters: int = 10
    n_regulators: int = 30
    and_share: float = 0.5  # share of two-regulator AND terms: the non-additivity knob
    n_singles: int = 20
    n_doubles: int = 30
    and_pair_share: float = 0.7  # share of doubles drawn from regulator pairs of AND terms
    cells_per_condition: int = 200
    control_cells: int = 600
    perturbation: str = "knockdown"  # knockdown | knockout | activation
    efficiency: float = 0.9  # mean knockdown efficiency e (multiplier 1 - e), Beta-distributed per cell
    efficiency_concentration: float = 20.0
    activation: float = 3.0  # mean activation a (multiplier 1 + a), gamma-distributed per cell
    cell_scale_sd: float = 0.1  # sd of log cell scale s_c
    noise: float = 1.0  # chemical Langevin noise amplitude
    steps: int = 60
    dt: float = 0.08
    level: float = 20.0  # typical molecules per gene
    depth: float = 2000.0  # mean counts per cell
    library_sd: float = 0.3  # sd of log library size
    dispersion: float = 10.0  # negative-binomial θ (variance μ + μ²/θ)
    target_sum: float = TARGET_SUM
    hill: float = 2.0  # Hill coefficient n (cooperativity of regulator binding)
    or_share: float = 0.0  # share of two-regulator terms that are OR (either regulator suffices) instead of AND
    zero_inflation: float = 0.0  # probability that a count is replaced by 0 (technical dropout)
    n_batches: int = 1  # batches, cells assigned uniformly at random (obs['batch'])
    batch_sd: float = 0.0  # sd of the per-batch, per-gene log factor on the expected counts
    engine: str = "auto"  # Langevin steps: numpy (float64) | torch | compiled (float32) | auto (compiled from WIDE)
    sparse: str = "auto"  # X and counts as CSR: true | false | auto (from WIDE genes)

    @property
    def resolved_engine(self) -> str:
        """``numpy``, ``torch`` or ``compiled`` (``auto``: compiled on a panel of :data:`WIDE` genes, else numpy)."""
        if self.engine == "auto":
            return "compiled" if self.n_genes >= WIDE else "numpy"
        return self.engine

    @property
    def is_sparse(self) -> bool:
        """``X`` and ``layers['counts']`` are written as CSR matrices."""
        return self.sparse == "true" or (self.sparse == "auto" and self.n_genes >= WIDE)

    @classmethod
    def from_dict(cls, data: dict | None) -> SimConfig:
        """Build from a mapping; unknown keys are a ``ValueError`` naming them."""
        data = dict(data or {})
        for k in ("sparse",):  # a YAML boolean reads as true / false
            if isinstance(data.get(k), bool):
                data[k] = str(data[k]).lower()
        cfg = typed_config(cls, data, "grn config", "numbers for counts and rates, a name for 'perturbation'")
        bad = [f.name for f in fields(cls) if f.name not in ("seed", "perturbation", "engine", "sparse")
               and getattr(cfg, f.name) < 0]
        bad += [n for n in ("n_genes", "cells_per_condition", "control_cells", "steps", "n_batches")
                if getattr(cfg, n) < 1]
        bad += [n for n in ("or_share", "zero_inflation") if getattr(cfg, n) > 1]
        if bad:
            raise ValueError(f"grn config: {sorted(set(bad))} must be positive (counts >= 1, rates >= 0, "
                             "shares at most 1)")
        if cfg.n_regulators > cfg.n_genes or cfg.n_masters > cfg.n_genes:
            raise ValueError(f"grn config: n_regulators {cfg.n_regulators} and n_masters {cfg.n_masters} must "
                             f"not exceed n_genes {cfg.n_genes}")
        if cfg.perturbation not in PERTURBATION_TYPES:
            raise ValueError(f"grn config: perturbation {cfg.perturbation!r}; choose one of {PERTURBATION_TYPES}")
        if cfg.engine not in ENGINES or cfg.sparse not in ("auto", "true", "false"):
            raise ValueError(f"grn config: engine {cfg.engine!r} / sparse {cfg.sparse!r}; engine one of {ENGINES}, "
                             "sparse one of auto, true, false")
        if cfg.n_singles > cfg.n_regulators:
            raise ValueError(f"grn config: n_singles {cfg.n_singles} > n_regulators {cfg.n_regulators}")
        return cfg


def typed_config(cls, data: dict, name: str, hint: str):
    """``cls(**data)`` (a dataclass), each value cast to its field's default type.

    Unknown keys are a ``ValueError`` naming them; a value of the wrong type one saying ``hint`` (``name``: the
    config, for the message).
    """
    known = [f.name for f in fields(cls)]
    unknown = set(data) - set(known)
    if unknown:
        raise ValueError(f"{name}: unknown keys {sorted(unknown)}; known: {known}")
    try:
        return cls(**{k: type(getattr(cls, k))(v) for k, v in data.items()})
    except (TypeError, ValueError):
        raise ValueError(f"{name}: a value has the wrong type in {data}; {hint}") from None


def choose_conditions(grn: GRN, cfg: SimConfig, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """Singles among regulators (AND partners first) and doubles (a share from AND pairs, the rest random)."""
    targets = {int(r) for r in grn.regs.ravel() if r >= 0}
    pairs = [p for p in grn.and_pairs() if p[0] in targets and p[1] in targets]
    # AND pairs driving many genes first (random tie-break): their doubles carry the largest interactions
    genes_driven = Counter(tuple(sorted(r)) for r in grn.regs.tolist())
    weight = {p: genes_driven[p] + rng.random() for p in pairs}
    singles: list[int] = []
    for p in sorted(pairs, key=weight.get, reverse=True):
        if len(singles) + len(set(p) - set(singles)) <= round(0.75 * cfg.n_singles):
            singles += [g for g in p if g not in singles]
    rest = [int(g) for g in rng.permutation(sorted(targets)) if g not in singles]
    singles = sorted(singles + rest[: cfg.n_singles - len(singles)])
    in_pool = [p for p in pairs if p[0] in singles and p[1] in singles]
    n_and = min(len(in_pool), int(round(cfg.and_pair_share * cfg.n_doubles)))
    doubles = [in_pool[i] for i in rng.choice(len(in_pool), n_and, replace=False)]
    all_pairs = [(a, b) for i, a in enumerate(singles) for b in singles[i + 1:] if (a, b) not in doubles]
    doubles += [all_pairs[i] for i in rng.choice(len(all_pairs), cfg.n_doubles - n_and, replace=False)]
    return [()] + [(g,) for g in singles] + sorted(doubles)


def multipliers(genes: tuple[int, ...], n: int, n_genes: int, cfg: SimConfig, rng) -> tuple[np.ndarray, np.ndarray]:
    """Per-cell production multipliers (n, G) and per-cell efficiencies (n,) of one condition."""
    mult = np.ones((n, n_genes))
    factor, eff = efficiencies(genes, n, cfg, rng)
    for g in genes:
        mult[:, g] = factor
    return mult, eff


def efficiencies(genes: tuple[int, ...], n: int, cfg: SimConfig, rng) -> tuple[np.ndarray, np.ndarray]:
    """Multiplier m of the perturbed genes (n,) and efficiency (n,) of each cell (0 for controls).

    Knockdown: e ~ Beta(k·ē, k·(1 − ē)), m = 1 − e; knockout: e = 1, m = 0; activation: e ~ Gamma(k, ā/k),
    m = 1 + e (k = ``efficiency_concentration``).
    """
    k = cfg.efficiency_concentration
    if cfg.perturbation == "knockdown":
        eff = rng.beta(k * cfg.efficiency, k * (1 - cfg.efficiency), n)
        factor = 1 - eff
    elif cfg.perturbation == "knockout":
        eff, factor = np.ones(n), np.zeros(n)
    else:
        eff = rng.gamma(k, cfg.activation / k, n)
        factor = 1 + eff
    return factor, (eff if genes else np.zeros(n))


def mean_multiplier(genes: tuple[int, ...], n_genes: int, cfg: SimConfig) -> np.ndarray:
    """Multipliers (G,) at the mean efficiency (noise-free ground truth)."""
    mult = np.ones(n_genes)
    factor = {"knockdown": 1 - cfg.efficiency, "knockout": 0.0, "activation": 1 + cfg.activation}[cfg.perturbation]
    mult[list(genes)] = factor
    return mult


def counts_from_levels(x: np.ndarray, cfg: SimConfig, rng: np.random.Generator,
                       batch_factor: np.ndarray | None = None, total: float | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Negative-binomial counts (Gamma–Poisson) with mean ℓ_c · depth · x / mean total · β_{b(c)}, ℓ_c log-normal.

    ``batch_factor`` ``(n_batches, G)``: multiplicative batch effect β of the cell's batch b(c) (drawn uniformly);
    then a share ``cfg.zero_inflation`` of the counts is set to 0. ``total``: the mean of ``Σ_g x`` over the
    condition's cells when ``x`` (cells, G) holds only some of them (default: over ``x``). Returns counts and the
    batch of each cell.
    """
    mu, batch = count_means(x, cfg, rng, batch_factor, total)
    rate = rng.gamma(cfg.dispersion, np.maximum(mu, 1e-12) / cfg.dispersion)
    counts = rng.poisson(rate).astype(np.float32)
    if cfg.zero_inflation > 0:
        counts[rng.random(counts.shape) < cfg.zero_inflation] = 0.0
    return counts, batch


def count_means(x: np.ndarray, cfg: SimConfig, rng: np.random.Generator, batch_factor: np.ndarray | None = None,
                total: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Expected counts ``ℓ_c · depth · x / total · β_{b(c)}`` (cells, G) float64 and the batch of each cell.

    The draws of ℓ (log-normal library sizes) and b come first in :func:`counts_from_levels`, in this order.
    """
    lib = rng.lognormal(-0.5 * cfg.library_sd**2, cfg.library_sd, (len(x), 1))
    total = float(x.sum(axis=1).mean()) if total is None else total
    mu = lib * cfg.depth * x / max(total, 1e-12)
    batch = np.zeros(len(x), dtype=np.int64)
    if batch_factor is not None:
        batch = rng.integers(0, len(batch_factor), len(x))
        mu = mu * batch_factor[batch]
    return mu, batch


def gene_names(n: int) -> list[str]:
    """Gene symbols ``G000``, ``G001``, ... (zero-padded so that sorting keeps the network order)."""
    width = max(3, len(str(n - 1)))
    return [f"G{i:0{width}d}" for i in range(n)]


def simulate_conditions(grn: GRN, conds: list[tuple[int, ...]], cfg: SimConfig, rng) -> dict:
    """Cells of every condition, in order.

    Returns ``counts`` and ``x_log`` (cells, G) float32 (CSR when ``cfg.is_sparse``), ``cond`` index,
    ``efficiency`` and ``batch`` per cell, and ``var`` (n_cond, G): the squared standard error of each condition's
    log1p mean (``var(x_log)/n``).
    """
    counts, x_log, var, cond, eff, batch = [], [], [], [], [], []
    factor = None
    if cfg.n_batches > 1:
        factor = rng.lognormal(0.0, cfg.batch_sd, (cfg.n_batches, grn.n_genes))
    if cfg.resolved_engine == "compiled":
        return _simulate_compiled(grn, conds, cfg, rng, factor)
    every = max(len(conds) // 10, 1)
    for i, genes in enumerate(conds):
        n = cfg.control_cells if not genes else cfg.cells_per_condition
        mult, e = multipliers(genes, n, grn.n_genes, cfg, rng)
        scale = rng.lognormal(0.0, cfg.cell_scale_sd, (n, 1))
        x0 = grn.steady_state(mult, scale)
        if cfg.resolved_engine == "torch":
            x = grn.langevin_torch(x0, mult, scale, int(rng.integers(2**62)), cfg.steps, cfg.dt, cfg.noise)
        else:
            x = grn.langevin(x0, mult, scale, rng, cfg.steps, cfg.dt, cfg.noise)
        c, b = counts_from_levels(x, cfg, rng, factor)
        xl = log_normalise(c, cfg.target_sum)
        var.append(xl.var(axis=0, ddof=1) / n)
        counts.append(_store(c, cfg))
        x_log.append(_store(xl, cfg))
        batch.append(b)
        cond += [i] * n
        eff.append(e)
        if (i + 1) % every == 0 or i + 1 == len(conds):
            note(f"simulated {i + 1}/{len(conds)} conditions ({grn.n_genes} genes)")
    return {"counts": _stack(counts), "x_log": _stack(x_log), "var": np.stack(var), "cond": np.array(cond),
            "efficiency": np.concatenate(eff), "batch": np.concatenate(batch)}


def _simulate_compiled(grn: GRN, conds: list[tuple[int, ...]], cfg: SimConfig, rng, batch_factor) -> dict:
    """:func:`simulate_conditions` with :meth:`GRN.langevin_compiled`, conditions in parallel threads.

    The main generator draws, condition by condition, the multipliers, cell scales and one seed; the seed drives
    the condition's normals and counts (counter-based, :mod:`sciml.perturbation.sim.kernels`) and library sizes
    (numpy), so that the screen does not depend on the number of threads (``torch.get_num_threads()``, a
    condition each; the kernels and the draws release the GIL). Compared with the per-condition loop: the same
    law, other random numbers.
    """
    from concurrent.futures import ThreadPoolExecutor

    import torch

    plan = []
    for genes in conds:
        n = cfg.control_cells if not genes else cfg.cells_per_condition
        factor, e = efficiencies(genes, n, cfg, rng)
        plan.append((genes, factor, e, rng.lognormal(0.0, cfg.cell_scale_sd, n), int(rng.integers(2**62))))
    parts, every = [], max(len(conds) // 10, 1)
    grn.compile()  # once, here, rather than in the first threads at the same time
    with ThreadPoolExecutor(max(torch.get_num_threads(), 1)) as pool:
        for i, part in enumerate(pool.map(lambda p: _condition_cells(grn, p, cfg, batch_factor), plan)):
            parts.append(part)
            if (i + 1) % every == 0 or i + 1 == len(conds):
                note(f"simulated {i + 1}/{len(conds)} conditions ({grn.n_genes} genes, compiled)")
    cond = np.concatenate([np.full(len(p[2]), i) for i, p in enumerate(plan)])
    counts = _stack([c for p in parts for c in p.pop("counts")])  # the blocks go as soon as stacked
    return {"counts": counts, "x_log": _log_normalise_stacked(counts, cfg.target_sum),
            "var": np.stack([p["var"] for p in parts]), "cond": cond,
            "efficiency": np.concatenate([p[2] for p in plan]), "batch": np.concatenate([p["batch"] for p in parts])}


def _log_normalise_stacked(counts, target_sum: float):
    """``log1p(c / Σc · target_sum)`` per cell of the stacked counts (the formula of :func:`log_normalise`).

    For CSR: on the non-zeros of this freshly built matrix, without the defensive copy of :func:`log_normalise`
    (a new ``data``, copied ``indices`` and ``indptr``); float32 sums of integer counts are exact.
    """
    if not hasattr(counts, "tocsr"):
        return log_normalise(counts, target_sum)
    import scipy.sparse as sp

    per_row = np.diff(counts.indptr)
    lib = np.zeros(counts.shape[0], dtype=np.float32)
    rows = per_row > 0
    lib[rows] = np.add.reduceat(counts.data, counts.indptr[:-1][rows])
    scale = np.float32(target_sum) / np.maximum(lib, np.float32(1e-12))
    data = np.log1p(counts.data * np.repeat(scale, per_row)).astype(np.float32, copy=False)
    return sp.csr_matrix((data, counts.indices.copy(), counts.indptr.copy()), shape=counts.shape)


def _condition_cells(grn: GRN, plan: tuple, cfg: SimConfig, batch_factor) -> dict:
    """One condition of :func:`_simulate_compiled`: levels, then counts by :data:`CHUNK` cells.

    Returns ``counts`` (a list of blocks as written), ``var`` (G,) the squared standard error of the log1p mean
    (from float64 sums of the chunks' log1p values, which are not kept), ``batch`` (n,).
    """
    genes, factor, _, scale, seed = plan
    x = grn.langevin_compiled(genes, factor, scale, seed, cfg.steps, cfg.dt, cfg.noise)
    rng = np.random.default_rng([seed, 1])
    total = float(x.sum(axis=1, dtype=np.float64).mean())
    counts, batch = [], []
    s1, s2 = np.zeros(grn.n_genes), np.zeros(grn.n_genes)
    for k, lo in enumerate(range(0, len(x), CHUNK)):
        mu, b = count_means(x[lo:lo + CHUNK], cfg, rng, batch_factor, total)
        c = negative_binomial(mu, cfg.dispersion, [seed, 2, k])  # the law of counts_from_levels
        if cfg.zero_inflation > 0:
            c[rng.random(c.shape) < cfg.zero_inflation] = 0.0
        xl = log_normalise(c, cfg.target_sum)
        s1 += xl.sum(axis=0, dtype=np.float64)
        s2 += np.square(xl, dtype=np.float64).sum(axis=0)
        counts.append(_store(c, cfg))
        batch.append(b)
    n = len(x)
    var = np.maximum(s2 - s1**2 / n, 0.0) / (n - 1) / n if n > 1 else np.full(grn.n_genes, np.nan)
    return {"counts": counts, "var": var, "batch": np.concatenate(batch)}


def _store(block: np.ndarray, cfg: SimConfig):
    """A condition's (n, G) float32 block as written: CSR when ``cfg.is_sparse``, else as is."""
    if not cfg.is_sparse:
        return block
    import scipy.sparse as sp

    return sp.csr_matrix(block)


def _stack(blocks: list):
    """The blocks stacked by rows (CSR stays CSR)."""
    if blocks and hasattr(blocks[0], "tocsr"):
        import scipy.sparse as sp

        return sp.vstack(blocks, format="csr")
    return np.concatenate(blocks)


def ground_truth(grn: GRN, conds: list[tuple[int, ...]], var: np.ndarray, cfg: SimConfig) -> dict:
    """Noise-free means (n_cond, G), interaction vectors of doubles, their noise floors and the interacting share.

    ``var`` (n_cond, G): squared standard errors of the conditions' log1p means (:func:`simulate_conditions`).
    """
    truth = np.stack([log_normalise(grn.steady_state(mean_multiplier(c, grn.n_genes, cfg))[None], cfg.target_sum)[0]
                      for c in conds])
    index = {c: i for i, c in enumerate(conds)}
    doubles = [c for c in conds if len(c) == 2]
    eps, floor = [], []
    for a, b in doubles:
        rows = [index[(a, b)], index[(a,)], index[(b,)], index[()]]
        eps.append(truth[rows[0]] - truth[rows[1]] - truth[rows[2]] + truth[rows[3]])
        floor.append(float(np.sqrt(var[rows].sum())))
    eps = np.array(eps).reshape(len(doubles), grn.n_genes)
    norms = np.linalg.norm(eps, axis=1)
    return {"true_mean": truth.astype(np.float32), "interaction": eps.astype(np.float32),
            "interaction_norm": norms, "noise_floor": np.array(floor),
            "fraction_interacting": float(np.mean(norms > np.array(floor))) if doubles else 0.0}


def simulate(cfg: SimConfig | dict | None = None):
    """Simulate a screen; return an AnnData (GEARS ``obs['condition']``, ``layers['counts']``, ``uns['grn']``).

    ``uns['grn']`` holds ``config``, ``conditions`` (labels, row order of ``true_mean``), ``true_mean``
    (n_cond, G) noise-free log1p means, ``doubles`` and ``interaction`` (n_double, G), ``interaction_norm``,
    ``noise_floor``, ``fraction_interacting``, ``and_pairs`` (gene symbols joined by ``+``) and ``edges``
    (E, 4: regulator, target, term, sign).
    """
    import anndata as ad
    import pandas as pd

    cfg = cfg if isinstance(cfg, SimConfig) else SimConfig.from_dict(cfg)
    rng = np.random.default_rng(cfg.seed)
    grn = random_grn(cfg.n_genes, cfg.n_masters, cfg.n_regulators, cfg.and_share, rng, level=cfg.level,
                     hill=cfg.hill, or_share=cfg.or_share)
    conds = choose_conditions(grn, cfg, rng)
    cells = simulate_conditions(grn, conds, cfg, rng)
    x_log = cells["x_log"]
    genes = gene_names(cfg.n_genes)
    labels = [format_condition([genes[g] for g in c]) for c in conds]
    truth = ground_truth(grn, conds, cells["var"], cfg)
    obs = pd.DataFrame({"condition": pd.Categorical([labels[i] for i in cells["cond"]], categories=labels),
                        "perturbation_type": np.where(cells["cond"] == 0, "control", cfg.perturbation),
                        "efficiency": cells["efficiency"].astype(np.float32),
                        "batch": pd.Categorical([f"b{b}" for b in cells["batch"]])},
                       index=[f"cell{i}" for i in range(x_log.shape[0])])
    adata = ad.AnnData(X=x_log, obs=obs, var=pd.DataFrame(index=genes), layers={"counts": cells["counts"]})
    adata.uns["grn"] = {"config": asdict(cfg), "conditions": labels,
                        "doubles": [lab for lab, c in zip(labels, conds, strict=True) if len(c) == 2],
                        "and_pairs": [f"{genes[a]}+{genes[b]}" for a, b in grn.and_pairs()],
                        "edges": grn.edges(), **truth}
    return adata


def read_ground_truth(adata) -> dict:
    """``uns['grn']`` of a simulated AnnData with ``true_mean`` and ``interaction`` keyed by condition label."""
    if "grn" not in adata.uns:
        raise ValueError("this AnnData has no uns['grn'] ground truth (write it with `sciml data grn`)")
    g = adata.uns["grn"]
    return {"true_mean": dict(zip(list(g["conditions"]), np.asarray(g["true_mean"]), strict=True)),
            "interaction": dict(zip(list(g["doubles"]), np.asarray(g["interaction"]), strict=True)),
            "noise_floor": dict(zip(list(g["doubles"]), np.asarray(g["noise_floor"]), strict=True)),
            "and_pairs": list(g["and_pairs"]), "fraction_interacting": float(g["fraction_interacting"])}
