"""Property-based tests (hypothesis) for the readers: any input either parses or gives the reader's own one-line
error naming the file -- never a foreign exception or a traceback from deep inside a parser."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sciml.core.structures import StructureError, read_structure

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = {p.name: p.read_text() for p in (ROOT / "examples" / "structures").iterdir()}
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAMES = ["x.cif", "x.vasp", "POSCAR", "x.extxyz", "x.json", "x.xyz"]


def _read(name: str, content: bytes):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(content)
        try:
            return read_structure(path)
        except StructureError as err:
            assert "\n" not in str(err) and str(path) in str(err)
            return err


@SETTINGS
@given(name=st.sampled_from(NAMES), content=st.binary(max_size=600))
def test_structure_reader_on_arbitrary_bytes(name, content):
    result = _read(name, content)
    assert isinstance(result, StructureError) or len(result) > 0


@SETTINGS
@given(example=st.sampled_from(sorted(EXAMPLES)), data=st.data())
def test_structure_reader_on_damaged_examples(example, data):
    """Drop, duplicate or corrupt lines of a valid file: it parses to a checked structure or errors cleanly."""
    lines = EXAMPLES[example].splitlines()
    k = data.draw(st.integers(0, len(lines) - 1))
    action = data.draw(st.sampled_from(["drop", "duplicate", "garble", "truncate"]))
    if action == "drop":
        lines = lines[:k] + lines[k + 1:]
    elif action == "duplicate":
        lines = lines[: k + 1] + lines[k:]
    elif action == "garble":
        lines[k] = data.draw(st.text(max_size=40))
    else:
        lines = lines[:k]
    result = _read(example, "\n".join(lines).encode("utf-8", errors="surrogatepass"))
    if not isinstance(result, StructureError):
        assert len(result) > 0 and np.isfinite(result.lattice.matrix).all()


anndata = pytest.importorskip("anndata")
from sciml.perturbation.data.anndata_io import DataError, check_finite, check_gene_order, read_h5ad  # noqa: E402
from sciml.perturbation.data.conditions import canonical_label, parse_condition  # noqa: E402


@SETTINGS
@given(content=st.binary(max_size=400))
def test_h5ad_reader_on_arbitrary_bytes(content):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cells.h5ad"
        path.write_bytes(content)
        with pytest.raises(DataError) as info:
            read_h5ad(path)
        assert "\n" not in str(info.value) and str(path) in str(info.value)


@SETTINGS
@given(label=st.text(alphabet=st.sampled_from("AB+ ctrl_-1"), max_size=16))
def test_condition_labels_parse_or_fail_in_one_line(label):
    try:
        genes = parse_condition(label)
    except ValueError as err:
        assert "\n" not in str(err) and repr(label) in str(err)
        return
    assert list(genes) == sorted(genes) and len(set(genes)) == len(genes)
    assert parse_condition(canonical_label(label)) == genes  # canonical labels are fixed points


@SETTINGS
@given(shape=st.tuples(st.integers(1, 8), st.integers(1, 8)), seed=st.integers(0, 2**16), n_bad=st.integers(0, 5))
def test_check_finite_counts_every_bad_value(shape, seed, n_bad):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(np.float32)
    flat = rng.choice(x.size, size=min(n_bad, x.size), replace=False)
    x.flat[flat] = rng.choice([np.nan, np.inf, -np.inf], size=len(flat))
    if len(flat) == 0:
        check_finite(x, "cells.h5ad", "X")
        return
    with pytest.raises(DataError, match=f"X holds {len(flat)} NaN/inf values"):
        check_finite(x, "cells.h5ad", "X")


@SETTINGS
@given(perm=st.permutations(list("ABCDEFG")), drop=st.integers(0, 7), extra=st.booleans())
def test_gene_order_check_matches_the_definition(perm, drop, extra):
    """Accepted iff every model gene is present and their relative order is the model's (drop=7 keeps all)."""
    genes = list("ABCDEFG")
    var_names = [g for i, g in enumerate(perm) if i != drop] + (["Z"] if extra else [])
    present = [g for g in var_names if g in genes]
    ok = set(genes) <= set(var_names) and present == genes
    if ok:
        check_gene_order(var_names, genes, "cells.h5ad")
    else:
        with pytest.raises(DataError, match="cells.h5ad"):
            check_gene_order(var_names, genes, "cells.h5ad")
