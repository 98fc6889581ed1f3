"""Every command of the README runs as written.

The README's fenced ``bash`` and ``python`` blocks are parsed. Each ``sciml ...`` command runs through the installed
console script, in README order, inside a scratch folder laid out like a clone (``configs/``, ``examples/``,
``datasets/`` and the shipped ``checkpoints/`` linked; ``../shared`` beside it when the development data exist), so
later commands use what earlier ones wrote and nothing is written into the repository. Commands that train get
short settings appended as dotted overrides (:data:`SHORT`); a training config whose data are not there (a fresh
clone has no ``../shared/data``) is pointed at data the test generates (:data:`STAND_IN`), or skipped when there
is none. Python blocks run as scripts in the same folder. The README's test command must be ``.ci/run``'s.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import ROOT, sciml_command

README = ROOT / "README.md"

#: ``sciml fit --config <key>`` of the README gets these overrides: one short epoch on a few batches.
SHORT = {
    "configs/crystal/perov5.yaml": ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2",
                                    "--trainer.limit_val_batches", "2", "--trainer.limit_test_batches", "2",
                                    "--trainer.enable_progress_bar", "false"],
    "configs/perturbation/grn_default.yaml": ["--trainer.max_epochs", "1", "--data.steps_per_epoch", "2",
                                              "--model.network.dim", "8", "--model.network.depth", "1",
                                              "--model.flow.steps", "2", "--model.flow.method", "euler",
                                              "--model.flow.val_steps", "1"],
}

#: Module an optional extra installs, per verb whose README section names that extra.
NEEDS = {"hamiltonian": "pyscf"}  # extra `quantum`

#: Programs the README's shell blocks may name besides ``sciml`` (the set-up steps of the two commands); they
#: are not run here (``tests/integration/test_install.py`` runs ``pip install .``).
SETUP = {"python3", "python", ".", "pip"}


def _toy_perovskites(folder: Path) -> Path:
    from sciml.testing.fixtures import write_perovskite_csv

    return write_perovskite_csv(folder / "toy_perovskites.csv", n=120, seed=0)  # 12 calib rows: finite at α = 0.1


#: config -> writer of generated stand-in data, used when the config's ``data.path`` is absent.
STAND_IN = {"configs/crystal/perov5.yaml": _toy_perovskites}


def readme_blocks(text: str | None = None) -> list[tuple[str, str]]:
    """``(language, code)`` of every fenced ``bash`` or ``python`` block of the README, in order."""
    text = README.read_text(encoding="utf-8") if text is None else text
    return re.findall(r"^```(bash|python)\n(.*?)^```", text, flags=re.S | re.M)


def shell_commands(code: str) -> list[list[str]]:
    """The commands of a shell block: continuation lines joined, comments dropped, ``&&`` chains split."""
    commands = []
    for line in code.replace("\\\n", " ").splitlines():
        tokens = shlex.split(line, comments=True)
        current: list[str] = []
        for token in [*tokens, "&&"]:
            if token == "&&":
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(token)
    return commands


def readme_steps() -> list[tuple[str, object]]:
    """``("sciml", argv)`` and ``("python", code)`` steps of the README in order (set-up commands left out)."""
    steps: list[tuple[str, object]] = []
    for language, code in readme_blocks():
        if language == "python":
            steps.append(("python", code))
            continue
        for argv in shell_commands(code):
            if argv[0] == "sciml":
                steps.append(("sciml", argv))
            elif argv[0] not in SETUP:
                raise AssertionError(f"README runs {argv[0]!r}, which this test neither runs nor knows as set-up")
    return steps


def main_command() -> str:
    """The README's first command line: set up and run the main job."""
    return readme_blocks()[0][1].strip()


def readme_test_command() -> str:
    """The README's command line that runs the tests."""
    lines = [code.strip() for language, code in readme_blocks() if language == "bash" and "pytest" in code]
    assert len(lines) == 1, f"expected one test command in the README, found {len(lines)}"
    return lines[0]


STEPS = readme_steps()


def _step_id(step: tuple[str, object]) -> str:
    kind, what = step
    return " ".join(what[1:])[:80] if kind == "sciml" else "python: " + what.strip().splitlines()[-1][:60]


def test_ci_runs_the_readme_test_command():
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert readme_test_command() in ci, f".ci/run does not run the README's test command:\n{readme_test_command()}"


def test_main_command_installs_the_package_and_runs_the_default_model():
    argv = shell_commands(main_command())
    assert ["pip", "install", "."] in argv, "the main command must install the package non-editably"
    job = argv[-1]
    assert job[:3] == ["sciml", "crystal", "predict"] and "--model" not in job, job


def test_readme_has_the_three_jobs_and_distinct_outputs():
    sciml = [argv for kind, argv in STEPS if kind == "sciml"]
    verbs = {" ".join(argv[1:3]) for argv in sciml}
    assert {"crystal predict", "hamiltonian predict", "perturbation predict"} <= verbs
    outputs = [argv[argv.index("--output") + 1] for argv in sciml if "--output" in argv]
    main_output = outputs[0]  # the main job's preds.csv
    assert len(set(outputs[1:])) == len(outputs) - 1 and main_output not in outputs[1:], outputs


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> dict:
    """A scratch folder laid out like a clone, and the shared state of the steps."""
    base = tmp_path_factory.mktemp("readme")
    ws = base / "sciml"
    ws.mkdir()
    for name in ("configs", "examples", "datasets"):
        (ws / name).symlink_to(ROOT / name, target_is_directory=True)
    (ws / "checkpoints").mkdir()  # a real folder, so that nothing a command writes lands in the repository
    for model in (ROOT / "checkpoints").iterdir():
        (ws / "checkpoints" / model.name).symlink_to(model, target_is_directory=True)
    shared = ROOT.parent / "shared"
    if shared.is_dir():
        (base / "shared").symlink_to(shared, target_is_directory=True)
    names = {"RANK", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_", "PL_")) and k not in names}
    env |= {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}
    return {"ws": ws, "env": env, "broken": None}


def _short(argv: list[str], ws: Path) -> list[str]:
    """Short settings for a ``sciml fit`` command (and stand-in data when the config's data are absent)."""
    if argv[1] != "fit":
        return []
    config = argv[argv.index("--config") + 1]
    assert config in SHORT, f"README trains {config}: add its short settings to SHORT in this test"
    extra = list(SHORT[config])
    data = Path(yaml.safe_load((ws / config).read_text())["data"]["path"])
    if "--data.path" not in argv and not (ws / data).exists():
        if config not in STAND_IN:
            pytest.skip(f"{data} is absent (development data in ../shared/data) and there is no stand-in")
        extra += ["--data.path", str(STAND_IN[config](ws))]
    return extra


def _inputs(argv: list[str]) -> list[str]:
    """Path arguments of a command other than its ``--output``."""
    output = argv[argv.index("--output") + 1] if "--output" in argv else None
    return [a for a in argv[1:] if "/" in a and not a.startswith("-") and a != output]


@pytest.mark.parametrize("step", STEPS, ids=[_step_id(s) for s in STEPS])
def test_readme_step_runs(step, workspace):
    ws, env = workspace["ws"], workspace["env"]
    kind, what = step
    if workspace["broken"] and kind == "sciml":
        missing = [a for a in _inputs(what) if not (ws / a).exists()]
        if missing:
            pytest.skip(f"needs {missing[0]}, which an earlier command that did not run would have written "
                        f"({workspace['broken']})")
    if kind == "sciml" and what[1] in NEEDS:
        pytest.importorskip(NEEDS[what[1]], reason=f"the README says {what[1]} needs an extra")
    workspace["broken"] = _step_id(step)  # cleared on success
    if kind == "python":
        script = ws / "readme_block.py"
        script.write_text(what, encoding="utf-8")
        cmd = [sys.executable, str(script)]
    else:
        cmd = [*sciml_command(), *what[1:], *_short(what, ws)]
    proc = subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (f"{shlex.join(cmd)} exited {proc.returncode}\n"
                                  f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")
    if kind == "sciml" and "--output" in what:
        output = ws / what[what.index("--output") + 1]
        assert output.exists(), f"{shlex.join(what)} exited 0 but wrote no {output.name}"
    workspace["broken"] = None
