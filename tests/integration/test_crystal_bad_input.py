"""Bad input: each bad file gets an error row, good files are still predicted; bad models exit non-zero."""

from __future__ import annotations

import pickle
import shutil

import pandas as pd
import pytest

from sciml.cli.main import main

from .conftest import ROOT

GOOD = ROOT / "examples" / "structures" / "SrTiO3.cif"
MALFORMED = "data_x\n_cell_length_a 3.9\nloop_\n_atom_site_label\n  this is not a cif\n"
UNKNOWN = GOOD.read_text().replace("Sr", "Xx")
UNSUPPORTED = GOOD.read_text().replace("Sr", "Og")  # Z = 118, outside the element table
UNSEEN = GOOD.read_text().replace("Sr", "U")  # a real element absent from the training data
OVERLAP = """overlap
1.0
3.9 0 0
0 3.9 0
0 0 3.9
Sr Ti
1 1
direct
0 0 0
0.01 0 0
"""


@pytest.fixture
def mixed_folder(tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(GOOD, folder / "a_good.cif")
    (folder / "b_malformed.cif").write_text(MALFORMED)
    (folder / "c_empty.cif").write_text("")
    (folder / "d_unknown_element.cif").write_text(UNKNOWN)
    (folder / "d_unsupported_element.cif").write_text(UNSUPPORTED)
    (folder / "e_overlap.vasp").write_text(OVERLAP)
    (folder / "i_unseen_element.cif").write_text(UNSEEN)
    (folder / "f_notes.txt").write_text("these are my notes, not a structure\n")
    (folder / "g_binary.cif").write_bytes(bytes(range(256)) * 4)
    shutil.copy(ROOT / "examples" / "structures" / "BaZrO3.vasp", folder / "h_good.vasp")
    return folder


def test_bad_files_get_error_rows(tiny_run, mixed_folder, tmp_path):
    out = tmp_path / "preds.csv"
    assert main(["crystal", "predict", "--model", str(tiny_run["artifact"]), str(mixed_folder),
                 "--output", str(out)]) == 1  # some inputs failed, the others were predicted
    df = pd.read_csv(out, comment="#")
    df = df.set_index(df["source"].map(lambda s: s.split("/")[-1]))
    assert df.loc["a_good.cif", "error"] != df.loc["a_good.cif", "error"]  # NaN: no error
    assert pd.notna(df.loc["a_good.cif", "heat_all"]) and pd.notna(df.loc["h_good.vasp", "heat_all"])
    assert pd.notna(df.loc["i_unseen_element.cif", "heat_all"]) and "U" in df.loc["i_unseen_element.cif", "note"]
    expect = {"b_malformed.cif": "", "c_empty.cif": "empty", "d_unknown_element.cif": "Xx",
              "d_unsupported_element.cif": "Og",
              "e_overlap.vasp": "Å", "f_notes.txt": "", "g_binary.cif": ""}
    for name, fragment in expect.items():
        reason = df.loc[name, "error"]
        assert isinstance(reason, str) and reason and "\n" not in reason and fragment in reason, (name, reason)
        assert pd.isna(df.loc[name, "heat_all"])


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0]
    return err[0]


def test_missing_model_folder(capsys, tmp_path):
    assert main(["crystal", "predict", "--model", str(tmp_path / "nope"), str(GOOD)]) != 0
    assert "no such model folder" in one_line_error(capsys)


def test_corrupted_weights(tiny_run, tmp_path, capsys):
    art = tmp_path / "art"
    shutil.copytree(tiny_run["artifact"], art)
    weights = art / "weights.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    assert main(["crystal", "predict", "--model", str(art), str(GOOD)]) != 0
    assert "weights.safetensors" in one_line_error(capsys)


def test_corrupted_metadata(tiny_run, tmp_path, capsys):
    art = tmp_path / "art"
    shutil.copytree(tiny_run["artifact"], art)
    (art / "metadata.json").write_text("{not json")
    assert main(["crystal", "predict", "--model", str(art), str(GOOD)]) != 0
    assert "metadata.json" in one_line_error(capsys)


class _Exploit:
    def __reduce__(self):
        import os

        return (os.system, ("touch PWNED_BY_CKPT",))


def test_pickle_payload_checkpoint_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ckpt = tmp_path / "evil.ckpt"
    ckpt.write_bytes(pickle.dumps({"state_dict": {}, "payload": _Exploit()}))
    assert main(["export", "--ckpt", str(ckpt), "--output", str(tmp_path / "out")]) != 0
    assert "refused" in one_line_error(capsys)
    assert not (tmp_path / "PWNED_BY_CKPT").exists()
