"""The import layers of ``.importlinter`` hold: cli -> families -> core -> uq; families apart; nn without Lightning;
no import cycle inside a family, core, uq or cli; the methods the families use do not import the uq catalogue."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _lint_imports() -> str:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.skip("import-linter is not installed (pip install import-linter)")
    return exe


def _contracts() -> dict:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / ".importlinter")
    return {s.split(":")[-1]: cfg[s] for s in cfg.sections() if s.startswith("importlinter:contract:")}


def test_contracts_name_every_family_and_layer():
    """The contracts cover what docs/design.md §1 states, so a deleted contract fails here, not silently."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / ".importlinter")
    contracts = {s.split(":")[-1]: cfg[s] for s in cfg.sections() if s.startswith("importlinter:contract:")}
    assert set(contracts) >= {"layers", "families", "base", "nn", "uq", "predict"}
    families = {"sciml.crystal", "sciml.hamiltonian", "sciml.perturbation"}
    assert set(contracts["families"]["modules"].split()) == families
    assert {f"{f}.nn" for f in families} == set(contracts["nn"]["source_modules"].split())
    assert "lightning" in contracts["nn"]["forbidden_modules"].split()
    assert cfg["importlinter"].getboolean("include_external_packages")
    assert families | {"sciml.cli"} <= set(contracts["base"]["forbidden_modules"].split())
    assert {"sciml.core", "sciml.uq"} == set(contracts["base"]["source_modules"].split())
    predict = set(contracts["predict"]["source_modules"].split())
    families = ("crystal", "hamiltonian", "perturbation")
    assert {f"sciml.{f}.{m}" for f in families for m in ("artifact", "model", "predict")} <= predict
    assert "lightning" in contracts["predict"]["forbidden_modules"].split()


def test_layers_run_cli_families_core_uq():
    """One direction between floors: uq is the ground floor, core above it (core may use uq, never the reverse)."""
    layers = [line.split("|") for line in _contracts()["layers"]["layers"].split("\n") if line.strip()]
    layers = [{name.strip() for name in layer} for layer in layers]
    assert layers == [{"sciml.cli", "sciml.testing"}, {"sciml.crystal", "sciml.hamiltonian", "sciml.perturbation"},
                      {"sciml.core"}, {"sciml.uq"}]


def test_every_package_has_an_acyclic_contract():
    """Each family, core, uq and cli is under an ``acyclic_siblings`` contract, so an import cycle cannot return."""
    ancestors = set()
    for contract in _contracts().values():
        if contract.get("type") == "acyclic_siblings":
            ancestors |= set(contract["ancestors"].split())
    packages = {p.name for p in (ROOT / "sciml").iterdir() if (p / "__init__.py").exists()} - {"testing"}
    assert {f"sciml.{p}" for p in packages} <= ancestors


def test_each_family_keeps_its_parts_in_one_order():
    """export and calibrate above task, task above module and predict, then artifact, model, nn, in every family."""
    contract = _contracts()["family-layers"]
    assert set(contract["containers"].split()) == {"sciml.crystal", "sciml.hamiltonian", "sciml.perturbation"}
    layers = [line.strip() for line in contract["layers"].split("\n") if line.strip()]
    assert layers == ["export : calibrate", "task", "module : predict", "artifact", "model", "nn"]


def test_uq_catalogue_is_above_the_methods_the_families_use():
    """``sciml/uq/`` modules (what the families use) import nothing from ``sciml/uq/catalogue/``."""
    contract = _contracts()["uq-catalogue"]
    assert contract["forbidden_modules"].split() == ["sciml.uq.catalogue"]
    used = {f"sciml.uq.{p.stem}" for p in (ROOT / "sciml" / "uq").glob("*.py") if p.stem != "__init__"}
    assert set(contract["source_modules"].split()) == used


def test_lint_imports_passes():
    exe = _lint_imports()
    run = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


@pytest.mark.parametrize("family", ["crystal", "hamiltonian", "perturbation"])
def test_prediction_runs_without_lightning(family):
    """`sciml <family> predict` never imports Lightning (~1.5 s of start-up): the models load as pure torch."""
    code = (f"import sys; import sciml.cli.main, sciml.cli.{family}, sciml.{family}.predict, "
            f"sciml.{family}.artifact as a; m = a.load_model(); "
            "sys.exit(2 if any(k.split('.')[0] == 'lightning' for k in sys.modules) else 0)")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:] or "lightning was imported"
