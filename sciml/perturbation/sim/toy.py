"""Small generated AnnData for tests and examples: a purely additive perturbation screen in log1p space."""

from __future__ import annotations

import numpy as np

from sciml.perturbation.data.conditions import format_condition


def toy_adata(n_genes: int = 12, n_singles: int = 4, doubles: list[tuple[int, int]] | None = None,
              cells: int = 30, control_cells: int = 60, noise: float = 0.2, seed: int = 0,
              control_label: str = "ctrl", key: str = "condition", interaction: float = 0.0):
    """An AnnData whose condition means are *exactly* additive: μ_c = μ_0 + Σ_{g ∈ c} δ_g (``interaction = 0``).

    With ``interaction = κ`` a double's mean is μ_0 + δ_a + δ_b + κ·δ_a·δ_b (a per-gene non-additive rule).

    Cells are ``μ_c + noise`` with the noise centred per condition, so the empirical means are exact and the
    additive baseline is exact to float precision. Genes ``g00, g01, ...``; singles perturb the first genes.

    Parameters
    ----------
    n_genes, n_singles : int
        Genes measured; singles perturb genes ``0 .. n_singles - 1``.
    doubles : list of index pairs
        Doubles (default: all pairs of the singles).
    cells, control_cells : int
        Cells per perturbed condition and control cells.
    noise : float
        Per-cell Gaussian sd (log1p units); the base level 5 keeps all values positive.
    seed : int
        Seed of ``numpy.random.default_rng``.
    interaction : float
        κ, the strength of the per-gene product interaction of doubles.
    control_label, key : str
        Label of control cells and the ``obs`` column of conditions (``ctrl``/``condition`` = GEARS; any other
        control label writes singles scPerturb-style as ``A``).

    """
    import anndata as ad
    import pandas as pd

    rng = np.random.default_rng(seed)
    genes = [f"g{i:02d}" for i in range(n_genes)]
    base = 5.0 + rng.uniform(-0.5, 0.5, n_genes)
    effect = rng.uniform(-1.0, 1.0, (n_singles, n_genes))
    if doubles is None:
        doubles = [(a, b) for a in range(n_singles) for b in range(a + 1, n_singles)]
    conds = [()] + [(i,) for i in range(n_singles)] + [tuple(d) for d in doubles]
    xs, labels = [], []
    for cond in conds:
        n = control_cells if not cond else cells
        eps = rng.normal(0.0, noise, (n, n_genes))
        mean = base + effect[list(cond)].sum(0)
        if len(cond) == 2:
            mean = mean + interaction * effect[cond[0]] * effect[cond[1]]
        xs.append(mean + eps - eps.mean(0))
        label = format_condition([genes[g] for g in cond])
        if control_label != "ctrl" and len(cond) == 1:  # scPerturb style: 'A' rather than 'A+ctrl'
            label = genes[cond[0]]
        labels += [control_label if not cond else label] * n
    obs = pd.DataFrame({key: labels}, index=[f"c{i}" for i in range(len(labels))])
    return ad.AnnData(np.concatenate(xs).astype(np.float32), obs=obs, var=pd.DataFrame(index=genes))
