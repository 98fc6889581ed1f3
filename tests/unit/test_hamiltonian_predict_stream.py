"""``predict_files`` streams inputs in chunks bounded by molecules and atom pairs; stage timings; the CLI's time line.

Uses the shipped water model (pyscf builds S and H0: ``importorskip``). Chunking only regroups molecules into
network calls: every molecule's result is the same as predicted alone, up to the float32 rounding of the network
(the ridge and assembly run in float64), so the tolerance is 1e-6 Ha on H and orbital energies (|H| ≲ 20 Ha,
float32 relative rounding 6e-8).
"""

from __future__ import annotations

import numpy as np
import pytest

from sciml.cli.hamiltonian import parse_timing_line, timing_line
from sciml.hamiltonian.data.gen_molecules import builtin_molecule, displaced_conformers

TOL = 1e-6  # Hartree, float32 network rounding (module docstring)
N_WATER = 5


@pytest.fixture(scope="module")
def waters(tmp_path_factory):
    pytest.importorskip("pyscf")
    from sciml.hamiltonian.artifact import DEFAULT_MODEL, load_model

    if not DEFAULT_MODEL.is_dir():
        pytest.skip(f"shipped model {DEFAULT_MODEL} absent")
    tmp = tmp_path_factory.mktemp("stream")
    numbers, ref = builtin_molecule("water")
    paths = []
    for k, pos in enumerate(displaced_conformers(ref, N_WATER, 0.02, seed=7)):
        path = tmp / f"w{k}.xyz"
        path.write_text("3\nwater\n" + "".join(f"{s} {x:.10f} {y:.10f} {z:.10f}\n"
                                               for s, (x, y, z) in zip("OHH", pos, strict=True)))
        paths.append(path)
    return {"tmp": tmp, "paths": paths, "predictor": load_model(DEFAULT_MODEL)}


def run(waters, name: str, **kwargs) -> tuple[list, dict]:
    from sciml.hamiltonian.predict import predict_files

    timings: dict = {}
    rows = list(predict_files(waters["paths"], waters["predictor"], waters["tmp"] / name, progress=False,
                              timings=timings, **kwargs))
    return rows, timings


def test_chunks_follow_batch_size_and_pair_budget(waters):
    alone, t_alone = run(waters, "alone", batch_size=1)
    assert t_alone["network_calls"] == N_WATER
    _, t_count = run(waters, "count", batch_size=2)
    assert t_count["network_calls"] == 3  # 2 + 2 + 1
    pairs, t_pairs = run(waters, "pairs", batch_size=16, max_pairs=2 * 9)  # water: 3² = 9 pairs
    assert t_pairs["network_calls"] == 3
    whole, t_whole = run(waters, "whole", batch_size=16)
    assert t_whole["network_calls"] == 1
    for stage in ("read", "h0_overlap", "network", "write"):
        assert t_whole[stage] > 0
    for rows in (pairs, whole):
        assert [r.prediction.source for r in rows] == [str(p) for p in waters["paths"]]  # input order kept
        for a, b in zip(alone, rows, strict=True):
            assert np.abs(a.prediction.orbital_energies - b.prediction.orbital_energies).max() < TOL
            ha = np.load(a.folder / "hamiltonian.npy")
            assert np.abs(ha - np.load(b.folder / "hamiltonian.npy")).max() < TOL


def test_large_molecule_goes_alone(waters):
    _, timings = run(waters, "tiny-budget", batch_size=16, max_pairs=1)  # each water exceeds the budget
    assert timings["network_calls"] == N_WATER


def test_shift_aware_is_one_chunk(waters):
    _, timings = run(waters, "shift", batch_size=1, max_pairs=1, shift_aware=True)
    assert timings["network_calls"] == 1


def test_timing_line_round_trip():
    timings = {"load": 0.93, "read": 0.012, "h0_overlap": 4.1, "network": 1.2, "network_calls": 2, "write": 0.4}
    line = timing_line(timings)
    assert line.startswith("time: load model 0.93 s") and "(2 calls)" in line
    parsed = parse_timing_line("some other line\n" + line + "\n")
    assert parsed == {"load": 0.93, "read": 0.01, "h0_overlap": 4.1, "network": 1.2, "network_calls": 2, "write": 0.4}
    assert parse_timing_line("no timing here") is None
