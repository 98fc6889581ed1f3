"""The program simulator: a screen by another law than the GRN, seeded, with non-additive doubles."""

from __future__ import annotations

import numpy as np
import pytest

from sciml.perturbation.sim.programs import ProgramConfig, simulate_programs

SMALL = {"n_genes": 60, "n_singles": 6, "n_doubles": 5, "cells_per_condition": 40, "control_cells": 80}


def test_screen_layout_counts_and_labels():
    a = simulate_programs(SMALL)
    assert a.shape == (80 + 11 * 40, 60)
    assert list(a.obs["condition"].cat.categories[:1]) == ["ctrl"] and (a.obs["condition"] == "ctrl").sum() == 80
    counts = a.layers["counts"]
    assert counts.dtype == np.int32 and counts.min() >= 0
    lib = np.asarray(counts.sum(1)).ravel()
    x = np.log1p(counts.toarray() / lib[:, None] * 1e4).astype(np.float32)
    np.testing.assert_allclose(a.X.toarray(), x, rtol=1e-5, atol=1e-6)  # X is the counts' log1p CP10k
    assert len(a.uns["programs"]["doubles"]) == 5 and all("+" in d for d in a.uns["programs"]["doubles"])


def test_seeded():
    one, two, other = (simulate_programs(SMALL | {"seed": s}) for s in (1, 1, 2))
    assert (one.layers["counts"] != two.layers["counts"]).nnz == 0
    assert (one.layers["counts"] != other.layers["counts"]).nnz > 0


def test_knockdown_lowers_the_perturbed_gene_and_doubles_are_not_additive():
    """Means over many cells: the own gene falls, and a double's effect departs from the sum of its singles'.

    The residual ``r = m_ab − m_a − m_b + m_ctrl`` of the condition means has sd ``sqrt(Σ_c var_c / n_c)`` under
    additivity; a z-score beyond 6 on one of 300 (double, gene) pairs has probability below 1e-6 by chance.
    """
    a = simulate_programs(SMALL | {"cells_per_condition": 400, "control_cells": 800, "synergy_sd": 1.0})
    x, labels = a.X.toarray(), a.obs["condition"].to_numpy()
    rows = {c: x[labels == c] for c in a.obs["condition"].cat.categories}
    mean = {c: v.mean(0) for c, v in rows.items()}
    sem2 = {c: v.var(0, ddof=1) / len(v) for c, v in rows.items()}
    genes = list(a.var_names)
    own = [mean[c][genes.index(c.split("+")[0])] - mean["ctrl"][genes.index(c.split("+")[0])]
           for c in mean if c.endswith("+ctrl")]
    assert max(own) < 0
    z = []
    for d in a.uns["programs"]["doubles"]:
        parts = [d, *(f"{g}+ctrl" for g in d.split("+")), "ctrl"]
        resid = mean[parts[0]] - mean[parts[1]] - mean[parts[2]] + mean[parts[3]]
        z.append(np.abs(resid) / np.sqrt(sum(sem2[c] for c in parts) + 1e-12))
    assert np.max(z) > 6


def test_bad_settings_name_the_field():
    with pytest.raises(ValueError, match="unknown keys"):
        ProgramConfig.from_dict({"n_gene": 5})
    with pytest.raises(ValueError, match="wrong type"):
        ProgramConfig.from_dict({"n_genes": "many"})
    with pytest.raises(ValueError, match="doubles"):
        ProgramConfig.from_dict({"n_singles": 3, "n_doubles": 4})
