"""Run-config keys of the crystal family (``sciml fit`` with ``task: crystal``), with defaults and meanings.

Torch-free: ``sciml fit --help`` and config errors read it before any heavy import. The defaults are the code's
(``tests/integration/test_config_schema.py`` checks them against the constructors they document).
"""

from __future__ import annotations

from sciml.core.schema import ConfigError, Key, Section, split_section

DATA_HINT = "dataset cards in datasets/ say where each set comes from; or point --data.path at your CSV"
"""How to get data when ``data.path`` does not exist."""

PRDNET = {"dim": Key(64, "width"), "n_layers": Key(3, "graph-attention blocks"), "n_rbf": Key(40, "radial basis size"),
          "n_bins": Key(32, "diffraction bins over |G|"),
          "n_gauss": Key(4, "Gaussians per scattering factor"), "diffraction": Key(True, "reciprocal-space branch"),
          "dropout": Key(0.0, "dropout before each head layer"), "ffn": Key(False, "feed-forward sublayers"),
          "edge_update": Key(False, "edge updates between blocks"),
          "site_resolved": Key(False, "per-atom interference shares")}
CGCNN = {"dim": Key(64, "width"), "n_layers": Key(3, "convolutions"), "n_rbf": Key(40, "radial basis size")}

SCHEMA = {
    "data": Section({
        "path": Key(None, "CSV with a 'cif' column, or a folder with id_prop.csv", "str", required=True),
        "target": Key(None, "target column of the CSV", "str", required=True),
        "unit": Key("", "target unit, e.g. eV/cell, eV/atom, eV (stored in the model card)"),
        "extensive": Key(None, "target grows with the cell (learned per atom, scaled by n_atoms); default from "
                               "unit: .../atom false, .../cell true", "bool"),
        "graph": Section({"cutoff": Key(8.0, "neighbour radius, Å"),
                          "max_neighbors": Key(12, "k nearest neighbours (null: all within cutoff)", nullable=True),
                          "g_max": Key(4.0, "largest reflection |G|, 1/Å"),
                          "tie_tol": Key(0.01, "neighbours this close (Å) to the k-th are kept too: whole shells")},
                         "graph settings (frozen in the model)"),
        "split": split_section([0.8, 0.1, 0.05, 0.05], 42),
        "batch_size": Key(64, "structures per batch (per process under DDP)"),
        "num_workers": Key(0, "DataLoader workers"),
        "workers": Key(1, "processes that parse and featurise the structures"),
        "cache": Key(None, "folder for a tensor cache of the graphs, reused by later runs", "str"),
        "zero_inflated": Key(False, "target >= 0 with a point mass at 0 (band gaps): predict P(y = 0) and the value"),
        "zero_label": Key("zero", "what y = 0 means (metal): the probability column is p_<label>"),
        "limit": Key(None, "use only the first N rows (smoke tests)", "int"),
    }),
    "model": Section({
        "network": Section({"name": Key(None, "network", "str", ("prdnet", "cgcnn"), required=True)},
                           by="name", variants={"prdnet": PRDNET, "cgcnn": CGCNN},
                           retired={"heads": "PRDNet's graph attention is per channel; heads never changed it"}),
        "optim": Section({"lr": Key(1e-3, "AdamW learning rate"), "weight_decay": Key(1e-5, "AdamW weight decay"),
                          "loss": Key("l1", "loss on the standardised target", "str", ("l1", "mse", "huber")),
                          "scheduler": Key("cosine", "one-cycle cosine schedule or none", "str", ("cosine", "none"))}),
    }),
}


def check_target_unit(data: dict) -> dict:
    """Crystal ``data`` with ``extensive`` set from ``unit`` when absent; a contradiction is a :class:`ConfigError`.

    ``.../atom`` units are intensive (``extensive: false``), ``.../cell`` units extensive (``true``); for any
    other unit (``eV`` may be a total energy or a band gap) ``extensive`` must be stated.
    """
    unit, extensive = str(data.get("unit") or ""), data.get("extensive")
    per = unit.replace(" ", "").rsplit("/", 1)[-1].lower() if "/" in unit else ""
    implied = {"atom": False, "cell": True}.get(per)
    if implied is None:
        if extensive is None:
            raise ConfigError(f"data.unit {unit!r} does not say per atom or per cell: set data.extensive (true: the "
                              "target grows with the cell, e.g. a total energy; false: it does not, e.g. a band gap)")
        return data
    if extensive is not None and bool(extensive) != implied:
        fix = "eV/cell" if extensive else "eV/atom"
        raise ConfigError(f"data.unit {unit!r} is per {per} but data.extensive is {extensive}: remove data.extensive "
                          f"(it follows the unit) or give the unit per {'cell' if extensive else 'atom'} (e.g. {fix})")
    return data | {"extensive": implied}


def derive(cfg: dict) -> dict:
    """The checked config with values derived from others: ``data.extensive`` from ``data.unit``."""
    return cfg | {"data": check_target_unit(cfg["data"])}
