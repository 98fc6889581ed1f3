from __future__ import annotations

import sys

import pytest

from ..conftest import BENCHMARKS


@pytest.fixture
def bench(load_benchmark, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports `_results` and `startup` beside it
    return load_benchmark("crystal_speed")


def test_chgnet_is_skipped_with_a_message_when_not_installed(bench, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "chgnet.model", None)  # import fails as if not installed
    got = bench.chgnet([], batch_size=4, repeats=1)
    assert set(got) == {"skipped"} and "pip install 'sciml[bench]'" in got["skipped"]
    assert "CHGNet skipped" in capsys.readouterr().err


def test_rates_and_batches(bench):
    assert bench.rates(10, 250, 2.0) == {"seconds": 2.0, "structures_per_s": 5.0, "atoms_per_s": 125.0}
    assert [len(b) for b in bench.batches(list(range(10)), 4)] == [4, 4, 2]
