"""Atomic writes and artifact verification."""

from __future__ import annotations

import json

import pytest
import torch

from sciml.core.io.artifact import ArtifactError, load_artifact, save_artifact, with_card_section
from sciml.core.io.atomic import atomic_directory, atomic_open, atomic_path, atomic_write_text


def test_failed_write_keeps_previous_file(tmp_path):
    path = tmp_path / "out.csv"
    atomic_write_text(path, "old\n")
    with pytest.raises(RuntimeError), atomic_open(path) as handle:
        handle.write("partial")
        raise RuntimeError("killed mid-write")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_path_writer_renames_its_file_in_or_keeps_the_previous_one(tmp_path):
    path = tmp_path / "out.h5ad"
    atomic_write_text(path, "old\n")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        assert tmp.name == "out.h5ad" and tmp.parent.parent == tmp_path
        tmp.write_text("partial")
        raise RuntimeError("killed mid-write")
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["out.h5ad"]
    with atomic_path(path) as tmp:
        tmp.write_text("new\n")
    assert path.read_text() == "new\n" and [p.name for p in tmp_path.iterdir()] == ["out.h5ad"]


def test_failed_directory_keeps_previous_folder(tmp_path):
    target = tmp_path / "model"
    with atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("v1")
    with pytest.raises(RuntimeError), atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("v2")
        raise RuntimeError("crash")
    assert (target / "a.txt").read_text() == "v1"
    with atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("v3")
    assert (target / "a.txt").read_text() == "v3"


def make_artifact(path):
    state = {"w": torch.arange(6.0).reshape(2, 3)}
    return save_artifact(path, config={"task": "toy"}, state_dict=state, metadata={"note": "x"},
                         calibrator={"method": "split"}, card="# toy\n")


def test_artifact_round_trip(tmp_path):
    art = load_artifact(make_artifact(tmp_path / "a"))
    assert torch.equal(art.state_dict["w"], torch.arange(6.0).reshape(2, 3))
    assert art.config == {"task": "toy"} and art.metadata["format_version"] == 1


@pytest.mark.parametrize("damage", ["truncate", "flip", "version", "missing"])
def test_damaged_artifacts_give_one_line_errors(tmp_path, damage):
    path = make_artifact(tmp_path / "a")
    weights, meta = path / "weights.safetensors", path / "metadata.json"
    if damage == "truncate":
        weights.write_bytes(weights.read_bytes()[:40])
    elif damage == "flip":
        data = bytearray(weights.read_bytes())
        data[-1] ^= 0xFF
        weights.write_bytes(bytes(data))
    elif damage == "version":
        meta.write_text(json.dumps(json.loads(meta.read_text()) | {"format_version": 99}))
    else:
        weights.unlink()
    with pytest.raises(ArtifactError) as err:
        load_artifact(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_atomic_outputs_get_normal_permissions(tmp_path):
    import os
    import stat

    umask = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "f.txt", "x")
        with atomic_path(tmp_path / "p.h5ad") as tmp:
            tmp.write_text("z")
        with atomic_directory(tmp_path / "d") as tmp:
            (tmp / "a").write_text("y")
        art = save_artifact(tmp_path / "art", config={"task": "toy"}, state_dict={"w": torch.ones(2)}, metadata={},
                            calibrator=None, card="#")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "f.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "p.h5ad").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o755
    assert {stat.S_IMODE(f.stat().st_mode) for f in art.iterdir()} == {0o644}  # safetensors alone writes 0600


def test_parse_extra_absent_parsed_or_one_line_error(tmp_path):
    from sciml.core.io.artifact import parse_extra

    art = load_artifact(save_artifact(tmp_path / "a", config={"task": "crystal"}, state_dict={"w": torch.zeros(2)},
                                      metadata={}, calibrator=None, card="# a", extras={"domain.json": {"k": 3}}))
    assert parse_extra(art, "other.json", dict) is None
    assert parse_extra(art, "domain.json", lambda d: d["k"]) == 3

    def reject(d):
        raise ValueError("field 'k' must be even")

    with pytest.raises(ArtifactError, match=r"domain\.json: field 'k' must be even; run add_domain$"):
        parse_extra(art, "domain.json", reject, "run add_domain")


def test_card_section_is_replaced_not_repeated():
    card = "# Model\n\nintro\n\n## Fit\n- old fit\n\n## Limits\n- limits\n"
    once = with_card_section(card, "Fit", "- new fit")
    assert once == "# Model\n\nintro\n\n## Limits\n- limits\n\n## Fit\n- new fit\n"
    twice = with_card_section(once, "Fit", "- newer fit")
    assert twice.count("## Fit") == 1 and twice.endswith("## Fit\n- newer fit\n") and "- new fit" not in twice
    assert with_card_section("# M\n", "Other", "- x") == "# M\n\n## Other\n- x\n"
