import pytest

from sciml.perturbation.data.conditions import (
    UnknownGeneError,
    canonical_label,
    check_genes,
    format_condition,
    gene_indices,
    parse_condition,
)


@pytest.mark.parametrize(("label", "control", "expected"), [
    ("ctrl", "ctrl", ()),
    ("control", "control", ()),
    ("ctrl", "control", ()),
    ("A+ctrl", "ctrl", ("A",)),
    ("ctrl+A", "ctrl", ("A",)),
    ("A", "control", ("A",)),
    ("B+A", "ctrl", ("A", "B")),
    (" A + B ", "control", ("A", "B")),
])
def test_parse_conventions(label, control, expected):
    assert parse_condition(label, control) == expected


def test_canonical_labels_round_trip():
    assert canonical_label("B+A") == "A+B"
    assert canonical_label("KLF1", "control") == "KLF1+ctrl"
    assert canonical_label("control", "control") == "ctrl"
    for genes in [(), ("A",), ("A", "B")]:
        assert parse_condition(format_condition(genes)) == genes


@pytest.mark.parametrize("label", ["A+", "+", "A+A"])
def test_malformed_labels(label):
    with pytest.raises(ValueError, match="condition"):
        parse_condition(label)


def test_unknown_gene_named():
    with pytest.raises(UnknownGeneError, match="ZZZ9"):
        check_genes(["A", "ZZZ9"], ["A", "B"])
    with pytest.raises(UnknownGeneError, match="ZZZ9"):
        gene_indices(("A", "ZZZ9"), {"A": 0, "B": 1})


def test_gene_indices_padding():
    vocab = {"A": 0, "B": 1, "C": 2}
    assert gene_indices(("C",), vocab) == [2, -1]
    assert gene_indices(("A", "C"), vocab) == [0, 2]
    assert gene_indices((), vocab) == [-1, -1]
    with pytest.raises(ValueError, match="at most 2"):
        gene_indices(("A", "B", "C"), vocab)
