"""What a model artifact is, read without torch: name, family, target, training data, domain (``sciml models``).

Everything comes from the artifact's own files: ``metadata.json`` (task, target and unit, element or gene
vocabulary, split sizes, the domain test's summary and ``extra_files``) and the model card ``README.md`` (its
summary paragraph and the data source of its ``## Data`` section, :mod:`sciml.core.io.card`). ``config.yaml`` and
``domain.json`` are not parsed (they can be megabytes): ``metadata.json`` lists and summarises the latter.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from sciml.core.elements import SYMBOLS
from sciml.core.io.shipped import shipped_models

__all__ = ["ModelInfo", "describe_model", "shipped_catalogue"]

#: family verb of each artifact ``task`` (a Hamiltonian crystal model is predicted by ``sciml hamiltonian``)
FAMILIES = {"crystal": "crystal", "hamiltonian": "hamiltonian", "hamiltonian-crystal": "hamiltonian",
            "perturbation": "perturbation"}
#: readable names of the domain tests recorded in metadata.json
METHODS = {"knn_conformal": "k-NN conformal p-value",
           "control_knn_conformal_median": "k-NN conformal p-value of the control cells (batch median)"}
#: what one predict command needs besides the model, per family (for the ``use`` line)
USAGE = {"crystal": "sciml crystal predict --model {name} STRUCTURES... --output preds.csv",
         "hamiltonian": "sciml hamiltonian predict --model {name} INPUTS... --output DIR",
         "perturbation": "sciml perturbation predict --model {name} --control ctrl.h5ad --perturbations 'A+B,C' "
                         "--output pred.h5ad"}


@dataclass(frozen=True)
class ModelInfo:
    """One artifact, described for a reader.

    Attributes
    ----------
    name : str
        Folder name (the shipped model name).
    family : str
        The ``sciml`` verb that predicts with it: ``crystal``, ``hamiltonian`` or ``perturbation``.
    target : str
        What it predicts and the unit, e.g. ``"heat_all (eV/cell)"``.
    summary : str
        First sentence of the model card.
    trained_on : str
        Data file and split sizes.
    domain : str
        Inputs it knows (elements or genes) and its domain test.
    usage : str
        A predict command with this model.
    path : str
        Artifact folder.

    """

    name: str
    family: str
    target: str
    summary: str
    trained_on: str
    domain: str
    usage: str
    path: str

    def to_dict(self) -> dict:
        """The fields as a JSON-ready dict."""
        return asdict(self)


def _card_sections(text: str) -> tuple[str, dict[str, list[str]]]:
    """The card's summary paragraph and its ``## `` sections as lists of non-empty lines."""
    summary, sections, current = [], {}, None
    for line in text.splitlines()[1:]:  # the first line is the title
        if line.startswith("## "):
            current = sections.setdefault(line[3:].strip(), [])
        elif current is not None:
            if line.strip():
                current.append(line.strip())
        elif line.strip() and not (summary and not summary[-1]):
            summary.append(line.strip())
        elif summary:
            summary.append("")
    return " ".join(s for s in summary if s), sections


def _first_sentence(text: str) -> str:
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    return (match.group(1) if match else text).strip()


def _trained_on(meta: dict, sections: dict[str, list[str]]) -> str:
    data = next(iter(sections.get("Data", [])), "")
    source = re.search(r"`([^`]+)`", data)
    name = Path(source.group(1)).name if source else ""
    sizes = meta.get("split_sizes") or {}
    counts = ", ".join(f"{sizes[k]} {k}" for k in ("train", "calib") if k in sizes)
    if not counts and meta.get("n_structures"):
        counts = f"{meta['n_structures']} structures"
    unit = "conditions" if meta.get("task") == "perturbation" else "structures"
    if counts and "structures" not in counts:
        counts += f" {unit}"
    return ", ".join(x for x in (name, counts) if x) or "not recorded"


def _vocabulary(meta: dict) -> str:
    if meta.get("task") == "perturbation":
        genes = meta.get("genes") or []
        train = ((meta.get("data") or {}).get("conditions") or {}).get("train") or []
        perturbed = {g for c in train for g in str(c).split("+") if g != "ctrl"}
        return f"{len(genes)} genes, {len(perturbed)} of them perturbed in the {len(train)} training conditions"
    elements = [SYMBOLS[e] if isinstance(e, int) and 0 < e < len(SYMBOLS) else str(e)
                for e in meta.get("elements") or []]
    if not elements:
        return "elements not recorded in metadata.json (see the model card)"
    shown = " ".join(elements) if len(elements) <= 12 else f"{' '.join(elements[:6])} ... {' '.join(elements[-3:])}"
    sizes = meta.get("training_domain") if isinstance(meta.get("training_domain"), dict) else {}
    atoms, heavy = sizes.get("n_atoms"), sizes.get("n_heavy_atoms")
    extent = (f", molecules of {atoms[0]}-{atoms[1]} atoms ({heavy[0]}-{heavy[1]} heavy)"
              if isinstance(atoms, list) and isinstance(heavy, list) and len(atoms) == len(heavy) == 2 else "")
    return f"{len(elements)} element{'s' if len(elements) > 1 else ''} ({shown}){extent}"


def _domain(meta: dict) -> str:
    extras = meta.get("extra_files") or {}
    summary = meta.get("domain") if isinstance(meta.get("domain"), dict) else {}
    metrics = meta.get("metrics") if isinstance(meta.get("metrics"), dict) else {}
    beta = summary.get("beta", metrics.get("domain_beta"))
    if "domain.json" in extras:
        method = METHODS.get(str(summary.get("method", "knn_conformal")), str(summary.get("method")))
        test = f"domain test {method} (domain.json)" + (f", flagged at p <= {beta:g}" if beta is not None else "")
    else:
        test = "no domain test (vocabulary rules only)"
    return f"{_vocabulary(meta)}; {test}"


def describe_model(path: str | Path) -> ModelInfo:
    """Describe the artifact folder ``path`` from its ``metadata.json`` and ``README.md``.

    Raises
    ------
    ValueError
        ``metadata.json`` missing or not JSON (one line naming the file).

    """
    path = Path(path)
    try:
        meta = json.loads((path / "metadata.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path / 'metadata.json'}: unreadable ({err.__class__.__name__}); "
                         "not a model folder") from None
    card = path / "README.md"
    summary, sections = _card_sections(card.read_text(encoding="utf-8")) if card.is_file() else ("", {})
    task = str(meta.get("task", "?"))
    family = FAMILIES.get(task, task)
    target = meta.get("target") or {}
    what = f"{target['name']} ({target.get('unit', 'no unit')})" if target.get("name") else "see the model card"
    usage = USAGE.get(family, "").format(name=path.name)
    return ModelInfo(path.name, family, what, _first_sentence(summary), _trained_on(meta, sections), _domain(meta),
                     usage, str(path))


def shipped_catalogue() -> list[ModelInfo]:
    """:func:`describe_model` of every shipped model, by name."""
    return [describe_model(p) for p in shipped_models().values()]
