"""Applicability domain end to end: export writes domain.json, predict reports it, --shift-aware guards."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml
from pymatgen.core import Lattice, Structure

from sciml.cli.main import main
from sciml.core.io.artifact import ArtifactError, load_artifact
from sciml.crystal import load_model, predict
from sciml.crystal.artifact import DEFAULT_MODEL
from sciml.testing.fixtures import perovskite, write_perovskite_csv

from .conftest import ROOT, tiny_config


@pytest.fixture(scope="module")
def domain_run(tmp_path_factory) -> dict:
    """The tiny recipe on 160 perovskites with 32 calibration structures (the domain test needs >= 19 at β=0.05)."""
    tmp = tmp_path_factory.mktemp("domain")
    data = write_perovskite_csv(tmp / "toy.csv", n=160, seed=0)
    config = tiny_config(tmp, data)
    cfg = yaml.safe_load(config.read_text())
    cfg["data"]["split"] = {"fractions": [0.5, 0.1, 0.2, 0.2], "seed": 1}
    config.write_text(yaml.safe_dump(cfg))
    assert main(["fit", "--config", str(config)]) == 0
    artifact = tmp / "artifact"
    assert main(["export", "--ckpt", str(tmp / "run" / "checkpoints" / "best.ckpt"), "--calibrate",
                 "--output", str(artifact)]) == 0
    return {"tmp": tmp, "artifact": artifact}


def far_structure() -> Structure:
    """A 2-atom rock-salt-like Sr-O cell: known elements, nothing like a perovskite."""
    return Structure(Lattice.cubic(2.6), ["Sr", "O"], [[0, 0, 0], [0.5, 0.5, 0.5]])


def test_export_writes_a_listed_bounded_domain_file(domain_run):
    art = load_artifact(domain_run["artifact"])
    assert "domain.json" in art.metadata["extra_files"] and art.metadata["domain"]["n_calib"] == 32
    domain = load_model(domain_run["artifact"]).domain
    assert domain.score.n_calib == 32 and domain.score.reference.shape[0] <= 1000 and domain.train_sizes == (5, 5)
    assert "Applicability domain" in (domain_run["artifact"] / "README.md").read_text()


def test_edited_domain_file_is_refused(domain_run, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(domain_run["artifact"], copy)
    (copy / "domain.json").write_text((copy / "domain.json").read_text().replace('"k": 5', '"k": 1'))
    with pytest.raises(ArtifactError, match="domain.json: checksum"):
        load_model(copy)


def test_domain_columns_flag_a_far_structure_and_unseen_elements(domain_run):
    rng = np.random.default_rng(5)
    near = [perovskite("Sr", "Ti", lattice=float(rng.uniform(3.8, 4.2)), jitter=0.05, rng=rng) for _ in range(3)]
    unseen = perovskite("Sr", "Hf", lattice=4.1)
    df = predict([*near, far_structure(), unseen], model=domain_run["artifact"])
    assert {"domain_pvalue", "in_domain"} <= set(df.columns)
    assert df["domain_pvalue"].between(1 / 33, 1).all()
    assert not df["in_domain"].iloc[3] and "out of domain" in df["note"].iloc[3]
    assert "training cells have 5-5" in df["note"].iloc[3] and "no guarantee" in df["note"].iloc[3]
    assert not df["in_domain"].iloc[4] and "Hf" in df["note"].iloc[4]
    assert "\n" not in "".join(df["note"])


def test_cli_counts_flagged_rows_and_marks_their_intervals(domain_run, tmp_path, capsys):
    folder = tmp_path / "inputs"
    folder.mkdir()
    far_structure().to(filename=str(folder / "far.cif"))
    perovskite("Sr", "Ti", lattice=4.0).to(filename=str(folder / "srtio3.cif"))
    out = tmp_path / "preds.csv"
    assert main(["crystal", "predict", "--model", str(domain_run["artifact"]), str(folder), "--output", str(out)]) == 0
    captured = capsys.readouterr()
    df = pd.read_csv(out, comment="#")
    n_flagged = int((df["in_domain"] == False).sum())  # noqa: E712 (CSV booleans)
    assert n_flagged >= 1 and f"{n_flagged} with in_domain False" in captured.err
    header = captured.out.splitlines()[0].split()  # the terminal names the columns as the file does
    assert header[:8] == ["source", "formula", "n_atoms", "heat_all", "heat_all_lower", "heat_all_upper",
                          "domain_pvalue", "in_domain"] and "note" in header
    assert "False" in captured.out  # the flagged row says so in the in_domain column


def test_shift_aware_on_an_extreme_batch_gives_infinite_intervals(domain_run):
    rng = np.random.default_rng(0)
    same = [perovskite("Sr", "Ti", lattice=float(rng.uniform(3.7, 4.3)), jitter=0.05, rng=rng) for _ in range(12)]
    plain = predict(same, model=domain_run["artifact"])
    shifted = predict(same, model=domain_run["artifact"], shift_aware=True)
    assert shifted["heat_all_upper"].notna().all()
    far = [Structure(Lattice.cubic(2.5 + 0.02 * i), ["Sr", "O"], [[0, 0, 0], [0.5, 0.5, 0.5]]) for i in range(12)]
    guarded = predict(far, model=domain_run["artifact"], shift_aware=True)
    assert guarded["heat_all_upper"].map(math.isinf).all() and guarded["note"].str.contains("shift-aware").all()
    assert plain["heat_all_upper"].map(math.isfinite).all()
    with pytest.raises(ValueError, match="at least 5 structures"):
        predict(same[:3], model=domain_run["artifact"], shift_aware=True)


def test_shipped_perov5_model_has_a_domain_file_and_unchanged_weights():
    perov5 = DEFAULT_MODEL.parent / "perov5-heat-all"
    meta = json.loads((perov5 / "metadata.json").read_text())
    assert meta["weights_sha256"] == "cc275f4716290522d3dd2f2baefded2acd304b93479d340928008e7c6cf58fd2"
    predictor = load_model(perov5)
    assert predictor.domain is not None and predictor.domain.score.n_calib == meta["split_sizes"]["calib"]
    df = predict([far_structure(), ROOT / "examples" / "structures"], model=predictor)
    assert not df["in_domain"].iloc[0] and "out of domain" in df["note"].iloc[0]


def test_add_domain_to_an_artifact_without_one_keeps_weights_and_calibrator(domain_run, tmp_path):
    import shutil

    from sciml.core.io.artifact import add_extra_files
    from sciml.crystal.calibrate import add_domain

    old = tmp_path / "old"
    shutil.copytree(domain_run["artifact"], old)
    meta = json.loads((old / "metadata.json").read_text())
    (old / "domain.json").unlink()
    meta.pop("extra_files"), meta.pop("domain")
    (old / "metadata.json").write_text(json.dumps(meta))  # as written before extras existed
    assert load_artifact(old).extras == {} and load_model(old).domain is None
    before = {name: (old / name).read_bytes() for name in ("weights.safetensors", "calibrator.json", "config.yaml")}
    structures = [perovskite("Sr", "Ti", lattice=4.0), far_structure()]
    values = predict(structures, model=old)
    domain = add_domain(old)
    assert {name: (old / name).read_bytes() for name in before} == before
    again = predict(structures, model=old)
    assert again["heat_all"].tolist() == values["heat_all"].tolist()
    assert again["heat_all_upper"].tolist() == values["heat_all_upper"].tolist()
    assert load_model(old).domain.to_dict() == domain.to_dict() and again["domain_pvalue"].notna().all()
    with pytest.raises(ValueError, match="managed by the artifact writer"):
        add_extra_files(old, {}, metadata={"weights_sha256": "x"})
    with pytest.raises(ValueError, match="lower-case"):
        add_extra_files(old, {"calibrator.json": {}})


def test_calibrate_domain_operation_writes_a_copy_with_domain_json(domain_run, tmp_path, capsys):
    """``sciml crystal calibrate --operation domain --output``: the copy gets domain.json, the source is unchanged."""
    import shutil

    old = tmp_path / "old"
    shutil.copytree(domain_run["artifact"], old)
    meta = json.loads((old / "metadata.json").read_text())
    (old / "domain.json").unlink()
    meta.pop("extra_files"), meta.pop("domain")
    (old / "metadata.json").write_text(json.dumps(meta))
    before = {p.name: p.read_bytes() for p in old.iterdir()}
    new = tmp_path / "new"
    assert main(["calibrate", "--model", str(old), "--operation", "domain", "--output", str(new)]) == 0
    assert "wrote domain test" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in old.iterdir()} == before
    assert load_model(new).domain is not None and load_model(old).domain is None
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no work folder left


def test_shift_aware_refuses_stale_scores_after_the_calibrator_was_replaced(domain_run, tmp_path):
    import shutil

    copy = tmp_path / "recalibrated"
    shutil.copytree(domain_run["artifact"], copy)
    cal = json.loads((copy / "calibrator.json").read_text())
    (copy / "calibrator.json").write_text(json.dumps(cal | {"scores": [s * 2 for s in cal["scores"]]}))
    predictor = load_model(copy)
    assert predictor.domain is not None and not predictor.shift_current
    structures = [perovskite("Sr", "Ti", lattice=3.9 + 0.02 * i) for i in range(6)]
    assert predict(structures, model=predictor)["domain_pvalue"].notna().all()  # the p-values stay valid
    with pytest.raises(ValueError, match="stale"):
        predict(structures, model=predictor, shift_aware=True)


def test_domain_of_another_width_is_refused_with_the_fix(domain_run, tmp_path):
    """A domain.json whose embeddings do not fit the network (checksum intact) names the file and says re-export."""
    import shutil

    from sciml.core.io.artifact import add_extra_files
    from sciml.crystal.artifact import embedding_dim

    copy = tmp_path / "copy"
    shutil.copytree(domain_run["artifact"], copy)
    domain = json.loads((copy / "domain.json").read_text())
    head = load_model(copy).module.net.head
    other = "hidden" if domain["layer"] == "pooled" else "pooled"
    assert embedding_dim(head, other) != embedding_dim(head, domain["layer"])  # else this test proves nothing
    add_extra_files(copy, {"domain.json": domain | {"layer": other}})
    with pytest.raises(ArtifactError, match=r"domain\.json: embedding dimension \d+ does not fit .*re-export"):
        load_model(copy)
