"""The run-config schema (``sciml.core.config``) and what ``sciml fit`` does with it.

Unknown keys name the closest valid one; a value outside its choices (or neither a float nor ``auto``) is one
line naming the dotted key and the allowed values, before any data is read; ``fit --help`` lists every key;
Lightning ``Trainer`` keys pass through or are refused by name; ``OMP_NUM_THREADS`` wins over ``threads``; a
reused run folder says on its first line that it resumes (``--fresh`` starts over); units and ``extensive``
agree; a missing data file fails before anything is written. The schema's keys and defaults are checked against
the constructors they document.
"""

from __future__ import annotations

import copy
import inspect
from pathlib import Path

import pytest
import torch
import yaml

from sciml.cli.main import main
from sciml.core.config import COMMON, REFUSED_TRAINER_KEYS, check_config, describe, resolve_threads, schemas
from sciml.core.schema import ConfigError, Key, Section, check_section
from sciml.crystal.schema import check_target_unit

from .conftest import ROOT

SCHEMA = schemas()

RUN_CONFIGS = sorted(p for p in (ROOT / "configs").glob("*/*.yaml") if "task" in yaml.safe_load(p.read_text()))


def config(name: str) -> dict:
    return yaml.safe_load((ROOT / "configs" / name).read_text())


def with_key(cfg: dict, dotted: str, value) -> dict:
    cfg = copy.deepcopy(cfg)
    *parents, leaf = dotted.split(".")
    node = cfg
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return cfg


def test_there_are_run_configs_of_every_family():
    assert {config(p.relative_to(ROOT / "configs").as_posix())["task"] for p in RUN_CONFIGS} == set(SCHEMA)


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_shipped_run_config_validates(path):
    cfg = yaml.safe_load(path.read_text())
    checked = check_config(cfg, source=path, data_path=False)
    assert checked["task"] == cfg["task"] and checked["trainer"] == cfg["trainer"]


def test_data_configs_validate():
    pytest.importorskip("anndata")
    from sciml.perturbation.sim.simulate import SimConfig

    paths = sorted((ROOT / "configs" / "data").glob("*.yaml"))
    assert paths
    for path in paths:
        SimConfig.from_dict(yaml.safe_load(path.read_text())["grn"])


MISSPELT = [  # (config, misspelt dotted key, the valid key the error must suggest)
    ("crystal/perov5.yaml", "sed", "seed"),
    ("crystal/perov5.yaml", "run_dri", "run_dir"),
    ("crystal/perov5.yaml", "calibration.scor", "calibration.score"),
    ("crystal/perov5.yaml", "calibration.alhpa", "calibration.alpha"),
    ("crystal/perov5.yaml", "slurm.auto_requeu", "slurm.auto_requeue"),
    ("crystal/perov5.yaml", "checkpoint.every_n_train_step", "checkpoint.every_n_train_steps"),
    ("crystal/perov5.yaml", "data.extensiv", "data.extensive"),
    ("crystal/perov5.yaml", "data.graph.cutof", "data.graph.cutoff"),
    ("crystal/perov5.yaml", "data.split.sead", "data.split.seed"),
    ("crystal/perov5.yaml", "model.optim.weight_decy", "model.optim.weight_decay"),
    ("crystal/perov5.yaml", "model.network.n_layer", "model.network.n_layers"),
    ("crystal/perov5.yaml", "trainer.max_epoch", "trainer.max_epochs"),
    ("crystal/perov5.yaml", "trainer.gradient_clip_vall", "trainer.gradient_clip_val"),
    ("hamiltonian/water.yaml", "model.ridge.lamb", "model.ridge.lam"),
    ("hamiltonian/water.yaml", "data.n_virtuals", "data.n_virtual"),
    ("perturbation/grn_default.yaml", "model.flow.mmd_weigth", "model.flow.mmd_weight"),
    ("perturbation/grn_default.yaml", "data.control_lable", "data.control_label"),
]


@pytest.mark.parametrize(("name", "key", "suggestion"), MISSPELT, ids=[m[1] for m in MISSPELT])
def test_misspelt_key_is_an_error_naming_the_closest_valid_key(name, key, suggestion):
    with pytest.raises(ConfigError) as err:
        check_config(with_key(config(name), key, 1), data_path=False)
    message = str(err.value)
    assert key in message and repr(suggestion) in message and "\n" not in message


def test_misspelt_override_fails_before_the_run_folder_exists(tmp_path, capsys):
    run = tmp_path / "run"
    code = main(["fit", "--config", str(ROOT / "configs" / "crystal" / "perov5.yaml"), "--run_dir", str(run),
                 "--calibration.alhpa", "0.2"])
    err = capsys.readouterr().err
    assert code == 2 and "'calibration.alpha'" in err and len(err.strip().splitlines()) == 1
    assert not run.exists()


def test_key_of_another_network_names_the_network():
    cfg = with_key(with_key(config("crystal/perov5.yaml"), "model.network", {"name": "cgcnn", "dim": 8}),
                   "model.network.n_bins", 4)
    with pytest.raises(ConfigError, match=r"not a setting of name 'cgcnn' \(it belongs to 'prdnet'\)"):
        check_config(cfg, data_path=False)


def test_retired_key_is_refused_with_the_reason():
    with pytest.raises(ConfigError, match="model.network.heads' is retired .*per channel.*remove it"):
        check_config(with_key(config("crystal/perov5.yaml"), "model.network.heads", 4), data_path=False)


@pytest.mark.parametrize(("key", "value", "fragment"), [
    ("data.batch_size", "many", "expected a value of type int"),
    ("model.optim.loss", "l2", "did you mean 'l1'"),
    ("calibration.method", "mondrain", "did you mean 'mondrian'"),
    ("slurm.requeue_signal", "SIGUSR", "not a signal name"),
    ("data", [1, 2], "must be a mapping"),
    ("data.path", None, "needs a value"),
])
def test_bad_values_name_the_key(key, value, fragment):
    with pytest.raises(ConfigError, match=fragment) as err:
        check_config(with_key(config("crystal/perov5.yaml"), key, value), data_path=False)
    assert key.split(".")[0] in str(err.value)


def test_required_keys_and_numbers_yaml_reads_as_strings():
    cfg = config("crystal/perov5.yaml")
    del cfg["data"]["target"]
    with pytest.raises(ConfigError, match="'data.target' is missing"):
        check_config(cfg, data_path=False)
    checked = check_config(with_key(config("crystal/perov5.yaml"), "model.optim.lr", "1e-3"), data_path=False)
    assert checked["model"]["optim"]["lr"] == 1e-3  # YAML 1.1 reads 1e-3 as a string


def test_float_or_literal_key_takes_a_float_or_the_word():
    section = Section({"flow": Section({"kappa": Key(None, "share absorbed", "float|auto")})})
    check = lambda value: check_section({"flow": {"kappa": value}}, section, "model")["flow"]["kappa"]  # noqa: E731
    assert check(0.5) == 0.5 and check("auto") == "auto" and check("1e-3") == 1e-3 and check(None) is None
    for bad in ("atuo", True, [0.5]):
        with pytest.raises(ConfigError) as err:
            check(bad)
        message = str(err.value)
        assert "'model.flow.kappa'" in message and "a float or one of ['auto']" in message and "\n" not in message
    with pytest.raises(ConfigError, match="did you mean 'auto'"):
        check("atuo")


def test_choice_error_is_one_line_with_the_full_key_and_the_choices():
    section = Section({"flow": Section({"method": Key("rk4", "ODE solver", "str", ("euler", "rk4"))})})
    with pytest.raises(ConfigError) as err:
        check_section({"flow": {"method": "rk-4"}}, section, "model")
    assert str(err.value) == ("config key 'model.flow.method' is 'rk-4'; choose one of ['euler', 'rk4']; "
                              "did you mean 'rk4'?")


@pytest.mark.parametrize(("key", "value", "fragment"), [
    ("model.flow.denoise", "eb-joint", "did you mean 'eb_joint'?"),
    ("model.flow.kappa", "atuo", "did you mean 'auto'?"),
])
def test_bad_prior_setting_fails_before_any_data_is_read(tmp_path, capsys, key, value, fragment):
    """The config check names the key and its allowed values; the (missing) data file is never looked at."""
    run = tmp_path / "run"
    code = main(["fit", "--config", str(ROOT / "configs" / "perturbation" / "grn_default.yaml"), "--run_dir",
                 str(run), "--data.path", str(tmp_path / "absent.h5ad"), f"--{key}", value])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and not run.exists()
    assert f"'{key}'" in err and fragment in err and "one of" in err and "no such file" not in err


# ---------------------------------------------------------------- trainer pass-through
@pytest.mark.parametrize("key", sorted(REFUSED_TRAINER_KEYS))
def test_trainer_keys_sciml_sets_are_refused_with_the_reason(key):
    with pytest.raises(ConfigError, match=f"'trainer.{key}' is set by sciml: "):
        check_config(with_key(config("crystal/perov5.yaml"), f"trainer.{key}", "x"), data_path=False)


def test_default_root_dir_override_is_a_one_line_error_not_a_type_error(tmp_path, capsys):
    run = tmp_path / "run"
    code = main(["fit", "--config", str(ROOT / "configs" / "crystal" / "perov5.yaml"), "--run_dir", str(run),
                 "--trainer.default_root_dir", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and "'trainer.default_root_dir'" in err and "set run_dir" in err and "TypeError" not in err
    assert len(err.strip().splitlines()) == 1 and not run.exists()


def test_other_trainer_arguments_pass_through():
    import lightning

    cfg = config("crystal/perov5.yaml")
    cfg["trainer"] |= {"strategy": "ddp", "num_nodes": 2, "precision": "bf16-mixed", "max_time": "00:01:00:00"}
    assert check_config(cfg, data_path=False)["trainer"] == cfg["trainer"]
    valid = set(inspect.signature(lightning.Trainer.__init__).parameters) - {"self"}
    assert set(REFUSED_TRAINER_KEYS) <= valid  # refusals name real Trainer arguments


# ---------------------------------------------------------------- units and extensive
@pytest.mark.parametrize(("unit", "extensive", "expected"), [
    ("eV/atom", None, False), ("meV / atom", None, False), ("eV/cell", None, True), ("eV/atom", False, False),
    ("eV/cell", True, True), ("eV", True, True), ("eV", False, False), ("GPa", False, False),
])
def test_extensive_follows_the_unit(unit, extensive, expected):
    data = {"path": "x.csv", "target": "y", "unit": unit} | ({} if extensive is None else {"extensive": extensive})
    assert check_target_unit(data)["extensive"] is expected


@pytest.mark.parametrize(("unit", "extensive", "fix"), [("eV/atom", True, "eV/cell"), ("eV/cell", False, "eV/atom")])
def test_unit_contradicting_extensive_is_refused(unit, extensive, fix):
    cfg = config("crystal/perov5.yaml")
    cfg["data"] |= {"unit": unit, "extensive": extensive}
    with pytest.raises(ConfigError) as err:
        check_config(cfg, data_path=False)
    assert all(s in str(err.value) for s in ("data.unit", "data.extensive", "remove data.extensive", fix))


@pytest.mark.parametrize("unit", ["eV", "", "K"])
def test_unit_that_does_not_say_needs_extensive(unit):
    cfg = config("crystal/perov5.yaml")
    cfg["data"]["unit"] = unit
    del cfg["data"]["extensive"]
    with pytest.raises(ConfigError, match="set data.extensive"):
        check_config(cfg, data_path=False)


def test_intensive_target_needs_only_its_unit():
    cfg = config("crystal/perov5.yaml")
    cfg["data"]["unit"] = "eV/atom"
    del cfg["data"]["extensive"]
    assert check_config(cfg, data_path=False)["data"]["extensive"] is False


# ---------------------------------------------------------------- threads
@pytest.mark.parametrize(("threads", "env", "expected"), [
    (2, {"OMP_NUM_THREADS": "1"}, (1, "OMP_NUM_THREADS")),
    (None, {"OMP_NUM_THREADS": "3"}, (3, "OMP_NUM_THREADS")),
    (2, {}, (2, "config")),
    (2, {"OMP_NUM_THREADS": " "}, (2, "config")),
    (None, {}, (None, "default")),
])
def test_omp_num_threads_wins_over_threads(threads, env, expected):
    assert resolve_threads(threads, env) == expected


@pytest.mark.parametrize("env", ["two", "0"])
def test_bad_omp_num_threads_is_an_error(env):
    with pytest.raises(ConfigError, match="OMP_NUM_THREADS"):
        resolve_threads(2, {"OMP_NUM_THREADS": env})


# ---------------------------------------------------------------- help
def _dotted(keys, prefix=""):
    for name, spec in keys.items():
        if isinstance(spec, Section):
            yield from _dotted(spec.keys, f"{prefix}{name}.")
            for extra in spec.variants.values():
                yield from _dotted(extra, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", spec


def test_fit_help_lists_every_key_with_its_default(capsys):
    with pytest.raises(SystemExit) as done:
        main(["fit", "--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and "--section.key value" in out and "--fresh" in out and "OMP_NUM_THREADS" in out
    lines = out.splitlines()
    for keys in (COMMON, *SCHEMA.values()):
        for dotted, spec in _dotted(keys):
            shown = "(required)" if spec.required else "= "
            assert any(line.strip().startswith(f"{dotted} {shown}") for line in lines), dotted
    assert "trainer.max_epochs = 100" in out and "model.flow.remainder_mean = 1.0" in out
    assert all(key in out for key in REFUSED_TRAINER_KEYS)
    assert describe() in out


# ---------------------------------------------------------------- the schema documents the code
def _params(fn, drop=()) -> dict:
    params = inspect.signature(fn).parameters.items()
    return {k: None if p.default is p.empty else p.default for k, p in params if k not in {"self", *drop}}


def _defaults(keys) -> dict:
    return {k: v.default for k, v in keys.items() if isinstance(v, Key)}


def _same(schema: dict, code: dict, skip=()) -> None:
    assert set(schema) == set(code), (sorted(set(schema) ^ set(code)))
    as_list = lambda v: list(v) if isinstance(v, tuple) else v  # noqa: E731
    for k in set(schema) - set(skip):
        assert as_list(schema[k]) == as_list(code[k]), k


def test_crystal_schema_matches_the_code():
    from sciml.crystal.data.datamodule import CrystalDataModule
    from sciml.crystal.data.graphs import GraphSettings
    from sciml.crystal.model import RETIRED_NETWORK_KEYS
    from sciml.crystal.nn import NETWORKS

    data = SCHEMA["crystal"]["data"].keys
    _same(_defaults(data) | {"graph": None, "split": None}, _params(CrystalDataModule, ["run_dir"]),
          skip=["extensive"])  # extensive: derived from the unit
    _same(_defaults(data["graph"].keys), GraphSettings().to_dict())
    network = SCHEMA["crystal"]["model"].keys["network"]
    assert set(network.variants) == set(NETWORKS)
    for name, cls in NETWORKS.items():
        _same(_defaults(network.variants[name]), _params(cls, ["cutoff", "g_max", "n_out"]))  # n_out: from the target
    assert set(RETIRED_NETWORK_KEYS) <= set(network.retired)


def test_hamiltonian_schema_matches_the_code():
    from sciml.hamiltonian.data.datamodule import HamiltonianDataModule
    from sciml.hamiltonian.nn import HamiltonianNet
    from sciml.hamiltonian.nn.ridge import TensorProductRidge

    schema = SCHEMA["hamiltonian"]
    _same(_defaults(schema["data"].keys) | {"split": None}, _params(HamiltonianDataModule, ["run_dir"]))
    internal = ["node_irreps", "edge_irreps", "n_node_types", "n_edge_types"]
    network = _defaults(schema["model"].keys["network"].keys)
    assert network.pop("dtype") == "float32"  # read by the module, not the network
    _same(network, _params(HamiltonianNet, internal))
    ridge = _defaults(schema["model"].keys["ridge"].keys)
    assert ridge.pop("lam") == 1e-6  # the fit's penalty (sciml.hamiltonian.task.fit_ridge)
    _same(ridge, _params(TensorProductRidge, [*internal, "shapes"]))


def test_perturbation_schema_matches_the_code():
    pytest.importorskip("anndata")
    from sciml.perturbation.data.datamodule import SPLIT_DEFAULTS, PerturbationDataModule
    from sciml.perturbation.module import FLOW_DEFAULTS, OPTIM_DEFAULTS
    from sciml.perturbation.nn import PADTransformer

    schema = SCHEMA["perturbation"]
    _same(_defaults(schema["data"].keys) | {"split": None}, _params(PerturbationDataModule, ["run_dir"]))
    _same(_defaults(schema["data"].keys["split"].keys), SPLIT_DEFAULTS)
    model = schema["model"].keys
    _same(_defaults(model["network"].keys), _params(PADTransformer, ["n_genes", "prior_channels"]))
    _same(_defaults(model["flow"].keys), FLOW_DEFAULTS)
    _same(_defaults(model["optim"].keys), OPTIM_DEFAULTS)


# ---------------------------------------------------------------- missing data, resume, fresh, threads in a fit
def test_missing_data_file_says_no_such_file_and_how_to_get_it(tmp_path, monkeypatch, capsys):
    """A fresh clone without ../shared/data: one line naming the file and the config's hint; nothing written."""
    monkeypatch.chdir(tmp_path)
    code = main(["fit", "--config", str(ROOT / "configs" / "crystal" / "perov5.yaml")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "perov5_train_pool.csv: no such file" in err and "datasets/perov5/README.md" in err
    assert not (tmp_path / "runs").exists()


def test_rerun_says_it_resumes_on_its_first_line_and_fresh_starts_over(tiny_data, monkeypatch, capfd):
    """Threads: OMP_NUM_THREADS=1 wins over threads: 2 and is recorded. Resume: the first stderr line. Fresh:
    the previous outputs are removed, and the run starts at epoch 0 (one epoch: half the steps of two)."""
    cfg = yaml.safe_load(Path(tiny_data["config"]).read_text()) | {"threads": 2}
    config = tiny_data["tmp"] / "threads.yaml"
    config.write_text(yaml.safe_dump(cfg))
    run = Path(cfg["run_dir"])
    last = run / "checkpoints" / "last.ckpt"
    base = ["fit", "--config", str(config), "--model.optim.scheduler", "none"]
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert main([*base, "--trainer.max_epochs", "1"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    err = capfd.readouterr().err
    assert "resuming" not in err and "OMP_NUM_THREADS=1 wins over threads: 2" in err
    assert yaml.safe_load((run / "config.yaml").read_text())["threads"] == 1
    steps = torch.load(last, weights_only=True)["global_step"]

    assert main([*base, "--trainer.max_epochs", "2"]) == 0
    first = capfd.readouterr().err.splitlines()[0]
    assert first == f"resuming from {last} (to start fresh: --fresh, or another --run_dir)"
    assert torch.load(last, weights_only=True)["global_step"] == 2 * steps

    (run / "hpc_ckpt_3.ckpt").write_bytes(b"old")
    assert main([*base, "--trainer.max_epochs", "1", "--fresh"]) == 0
    err = capfd.readouterr().err
    assert err.splitlines()[0].startswith(f"starting fresh in {run}: removed ") and "resuming" not in err
    assert torch.load(last, weights_only=True)["global_step"] == steps and not (run / "hpc_ckpt_3.ckpt").exists()
    assert main([*base, "--fresh", "--ckpt_path", "last"]) == 2
    assert "give one of them" in capfd.readouterr().err
