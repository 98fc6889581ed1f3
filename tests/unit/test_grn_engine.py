"""The GRN simulator's fast paths: the network and conditions of a seed are unchanged (issue 38)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from sciml.perturbation.sim.grn import random_grn
from sciml.perturbation.sim.simulate import SimConfig, choose_conditions

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "perturbation"
SMALL = {"n_genes": 40, "n_masters": 5, "n_regulators": 14, "n_singles": 8, "n_doubles": 8, "seed": 1}


def _fingerprint(cfg: dict) -> tuple[str, float]:
    """sha256 (16 hex) of the network and conditions drawn from ``cfg``, and the next uniform of the generator.

    Integers and booleans enter exactly; floats rounded to 1e-6 (robust to a last-bit change of a sum).
    """
    c = SimConfig.from_dict(cfg)
    rng = np.random.default_rng(c.seed)
    grn = random_grn(c.n_genes, c.n_masters, c.n_regulators, c.and_share, rng, level=c.level, hill=c.hill,
                     or_share=c.or_share)
    conds = choose_conditions(grn, c, rng)
    h = hashlib.sha256()
    logic_or = grn.logic_or if grn.logic_or is not None else np.zeros(0)
    for a in (grn.target, grn.regs, grn.activating, logic_or):
        h.update(np.ascontiguousarray(a).astype(np.int64).tobytes())
    for a in (grn.basal, grn.strength, grn.half):
        h.update(np.round(a, 6).tobytes())
    h.update(json.dumps(conds).encode())
    return h.hexdigest()[:16], float(rng.random())


@pytest.mark.parametrize(("cfg", "digest", "after"), [
    (SMALL, "1b6ad8eb9c265590", 0.3109684208465644),
    ({"seed": 0}, "d9e40dec584714e4", 0.5547497004438227),
    ({"seed": 3, "or_share": 0.5, "and_share": 0.8}, "7ae38db8e999c599", 0.602239859931887),
    ("grn_1000.yaml", "9b39cd73e8d92f06", 0.6072249655627833),
    ("grn_5000.yaml", "c32e16ede5694878", 0.4239100919618858),
])
def test_network_and_conditions_of_a_seed_unchanged(cfg, digest, after):
    """Digests recorded with the implementation before the O(T²) scans of ``random_grn``/``choose_conditions``
    were removed (commit 135b083): same network, same conditions, same generator state afterwards."""
    if isinstance(cfg, str):
        cfg = yaml.safe_load((CONFIGS / cfg).read_text())["grn"]
    assert _fingerprint(cfg) == (digest, after)
