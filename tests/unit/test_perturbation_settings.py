"""The prior settings as one checked value: kinds, ranges, combinations, the schema built from them, and the config
check that refuses a bad value before any data is read."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sciml.core.schema import ConfigError
from sciml.perturbation.schema import SCHEMA, derive
from sciml.perturbation.settings import DENOISER_NAMES, PRIOR_FIELDS, PriorSettings

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_and_meanings_are_stated_once_and_the_schema_reads_them():
    flow = SCHEMA["model"].keys["flow"].keys
    for f in dataclasses.fields(PriorSettings):
        assert flow[f.name].default == f.default and flow[f.name].help == f.metadata["help"]
    assert flow["denoise"].kind == "float|auto|eb|eb_single|eb_joint"
    assert flow["kappa"].kind == flow["shrink"].kind == "float|auto" and flow["closure"].kind == "bool|auto"
    assert flow["prior"].choices == ("additive", "combination", "masking")
    assert len(PRIOR_FIELDS) == 12


def test_the_model_defaults_are_the_schemas():
    from sciml.perturbation.model import FLOW_DEFAULTS

    assert {k: FLOW_DEFAULTS[k] for k in PRIOR_FIELDS} == PriorSettings().to_flow()


def test_denoiser_names_are_the_functions_of_the_prior():
    from sciml.perturbation.prior import DENOISERS

    assert tuple(DENOISERS) == DENOISER_NAMES


@pytest.mark.parametrize(("changes", "message"), [
    ({"denoise": "eb-joint"}, r"flow.denoise is 'eb-joint'; use a number >= 0 or auto or eb or eb_single or eb_joint"),
    ({"kappa": "atuo"}, r"flow.kappa is 'atuo'; use a number in \[0, 1\] or auto"),
    ({"kappa": 1.5}, r"flow.kappa is 1.5; use a number in \[0, 1\] or auto"),
    ({"denoise": -1}, r"flow.denoise is -1; use a number >= 0"),
    ({"prior_dropout": 1.0}, r"flow.prior_dropout is 1; use a number in \[0, 1\)"),
    ({"prior": "mask"}, r"flow.prior is 'mask'; choose one of \['additive', 'combination', 'masking'\]"),
    ({"closure": "yes"}, r"flow.closure is 'yes'; use true or false or auto"),
    ({"exact_mean": 1}, r"flow.exact_mean is 1; use true or false"),
    ({"blend": 0.5}, r"flow.blend 0.5 averages the masking prior .* needs flow.prior: masking"),
    ({"closure": True, "prior": "combination"}, r"flow.closure true rescales the masking prior"),
])
def test_bad_values_and_combinations_are_refused_in_one_line(changes, message):
    with pytest.raises(ConfigError, match=message) as err:
        PriorSettings(**changes)
    assert "\n" not in str(err.value)


def test_values_are_typed_and_auto_counts_as_stated_until_chosen():
    s = PriorSettings(prior="masking", kappa="auto", denoise="auto", shrink="auto", blend=1)
    assert s.blend == 1.0 and isinstance(s.blend, float)
    assert (s.kappa_value, s.tau, s.rule_weight, s.closed) == (0.0, 0.0, 1.0, False)
    assert s.auto == ("shrink", "kappa", "denoise")
    assert s.replace(additive_fallback=True).rule_weight == 0.0
    eb = s.replace(denoise="eb_joint")
    assert eb.empirical_bayes and eb.tau == 0.0
    assert PriorSettings.from_flow(s.to_flow() | {"steps": 4, "path": "control"}) == s  # other flow keys ignored
    assert PriorSettings.from_flow(None) == PriorSettings()


def test_a_checkpoint_config_with_resolved_values_loads():
    flow = {"prior": "masking", "kappa": 0.9, "denoise": "eb_joint", "closure": True, "blend": 0.75, "shrink": 0.5,
            "remainder_mean": 0.0, "own_genes": "additive", "exact_mean": True, "additive_fallback": False,
            "steps": 4}
    s = PriorSettings.from_flow(flow)
    assert (s.kappa, s.denoise, s.closed, s.uses_rule) == (0.9, "eb_joint", True, True)


def test_the_config_check_names_the_key_of_a_bad_combination():
    cfg = {"model": {"flow": {"prior": "additive", "blend": 0.75}}}
    with pytest.raises(ConfigError, match=r"^config: model.flow.blend 0.75 averages"):
        derive(cfg)
    assert derive({"model": {"flow": {"prior": "masking", "blend": 0.75}}})["model"]["flow"]["blend"] == 0.75


@pytest.mark.parametrize(("override", "expected"), [
    (["--model.flow.denoise", "eb-joint"],
     "'model.flow.denoise' is 'eb-joint'; expected a float or one of ['auto', 'eb', 'eb_single', 'eb_joint']; "
     "did you mean 'eb_joint'?"),
    (["--model.flow.kappa", "atuo"], "'model.flow.kappa' is 'atuo'; expected a float or one of ['auto']"),
    (["--model.flow.kappa", "2"], "model.flow.kappa is 2; use a number in [0, 1] or auto"),
])
def test_fit_refuses_a_bad_prior_value_before_reading_any_data(tmp_path, monkeypatch, capsys, override, expected):
    from sciml.cli.main import main

    monkeypatch.chdir(tmp_path)  # the config's data file does not exist here: the check comes first
    code = main(["fit", "--config", str(ROOT / "configs" / "perturbation" / "grn_default.yaml"), *override])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and expected in err, err
    assert "no such file" not in err
