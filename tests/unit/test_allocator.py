"""``sciml.core.allocator.keep_freed_memory``: set on glibc, left alone when the user opts out."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from sciml.core.allocator import ENV, keep_freed_memory

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


@pytest.mark.parametrize("env", [{ENV: "0"}, {"MALLOC_MMAP_THRESHOLD_": "131072"}, {"MALLOC_TRIM_THRESHOLD_": "0"}])
def test_opting_out_changes_nothing(monkeypatch, env):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert keep_freed_memory() is False


@pytest.mark.skipif(not GLIBC, reason="mallopt thresholds are glibc's")
def test_thresholds_are_set_on_glibc(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    for key in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        monkeypatch.delenv(key, raising=False)
    assert keep_freed_memory() is True


def test_the_command_sets_them_before_running_a_verb():
    """``sciml`` calls it in ``main`` (a fresh process: the setting is process-wide)."""
    code = ("import sys, unittest.mock as m; import sciml.cli.main as c; "
            "p = m.patch.object(c, 'keep_freed_memory'); f = p.start(); "
            "rc = c.main(['crystal', 'predict', 'nosuch.cif', '--output', 'x.csv']); sys.exit(0 if f.called else 3)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
