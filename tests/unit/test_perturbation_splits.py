import json

import pytest

from sciml.perturbation.data.conditions import format_condition
from sciml.perturbation.data.splits import SPLIT_NAMES, make_split, read_split, write_split


def screen(n_singles=12, seed_pairs=None):
    genes = [f"G{i:02d}" for i in range(n_singles)]
    conds = {format_condition([g]): (g,) for g in genes}
    pairs = seed_pairs or [(a, b) for i, a in enumerate(genes) for b in genes[i + 1:]][::2]
    conds |= {format_condition(p): tuple(sorted(p)) for p in pairs}
    conds |= {"X+Y": ("X", "Y")}  # a double whose singles are absent
    return conds


def assert_partition(split, conds):
    lists = [split[name] for name in (*SPLIT_NAMES, "excluded")]
    flat = [k for part in lists for k in part]
    assert len(flat) == len(set(flat)) == len(conds)
    assert all(split[name] for name in SPLIT_NAMES)


@pytest.mark.parametrize("kind", ["unseen_single", "combo_seen0", "combo_seen1", "combo_seen2", "additive"])
def test_disjoint_and_reproducible(kind):
    conds = screen()
    a, b = make_split(conds, kind, seed=3), make_split(conds, kind, seed=3)
    assert a == b
    assert_partition(a, conds)
    assert make_split(conds, kind, seed=4) != a


def test_additive_holds_out_doubles_with_both_singles_in_train():
    conds = screen()
    split = make_split(conds, "additive", seed=0)
    train = set(split["train"])
    held = [k for name in ("val", "calib", "test") for k in split[name]]
    assert held and all(len(conds[k]) == 2 for k in held)
    for k in held:
        assert all(format_condition([g]) in train for g in conds[k])
        assert split["category"][k] == "double_seen2"
    assert "X+Y" in train and split["category"]["X+Y"] == "double_seen0"


@pytest.mark.parametrize("kind", ["unseen_single", "combo_seen0", "combo_seen1"])
def test_held_out_genes_never_perturbed_in_training(kind):
    conds = screen()
    split = make_split(conds, kind, seed=1)
    train_genes = {g for k in split["train"] for g in conds[k]}
    for name in ("val", "calib", "test"):
        for k in split[name]:
            assert not set(conds[k]) <= train_genes
    unseen = {k for k in split["test"] if len(conds[k]) == 1}
    assert all(split["category"][k] == "unseen_single" for k in unseen)
    if kind.startswith("combo_seen"):
        want = f"double_seen{kind[-1]}"
        held_doubles = [k for n in ("val", "calib", "test") for k in split[n] if len(conds[k]) == 2]
        assert all(split["category"][k] == want for k in held_doubles)


def test_by_cell_type():
    conds = {f"{lab}@{ct}": genes for ct in ("a", "b", "c") for lab, genes in screen(6).items()}
    types = {k: k.split("@")[1] for k in conds}
    split = make_split(conds, "by_cell_type", seed=0, cell_types=types, holdout_cell_type="b")
    assert_partition(split, conds)
    assert all(k.endswith("@b") for n in ("val", "calib", "test") for k in split[n])
    assert not any(k.endswith("@b") for k in split["train"])
    with pytest.raises(ValueError, match="not a cell type"):
        make_split(conds, "by_cell_type", cell_types=types, holdout_cell_type="zz")


def test_errors_and_json(tmp_path):
    with pytest.raises(ValueError, match="unknown; choose one of"):
        make_split(screen(), "random")
    with pytest.raises(ValueError, match="empty"):
        make_split({"A+ctrl": ("A",)}, "additive")
    split = make_split(screen(), "additive", seed=2)
    path = write_split(tmp_path / "split.json", split)
    assert read_split(path) == json.loads(json.dumps(split))
