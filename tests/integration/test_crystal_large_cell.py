"""A 5,000-atom cell predicts with the shipped perovskite model (diffraction branch on) in under 2 GiB."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import resource, sys
from sciml.cli.main import main
rc = main(["crystal", "predict", "--model", "perov5-heat-all", sys.argv[1], "--output", sys.argv[2]])
print("PEAK_KIB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
sys.exit(rc)
"""


@pytest.mark.slow
def test_five_thousand_atoms_predict_under_two_gib(tmp_path):
    from pymatgen.core import Structure

    cell = Structure.from_file(ROOT / "examples" / "structures" / "SrTiO3.cif")
    cell.make_supercell([10, 10, 10])
    assert len(cell) == 5000
    cell.to(filename=str(tmp_path / "SrTiO3_10x10x10.cif"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "SrTiO3_10x10x10.cif"),
                          str(tmp_path / "out.csv")], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    peak_kib = int(out.stdout.split("PEAK_KIB")[-1].split()[0])
    assert peak_kib < 2 * 2**20, f"peak RSS {peak_kib / 2**20:.2f} GiB"
    rows = pd.read_csv(tmp_path / "out.csv", comment="#")
    assert len(rows) == 1 and rows["n_atoms"].iloc[0] == 5000 and np.isfinite(rows["heat_all"].iloc[0])
