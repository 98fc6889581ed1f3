"""Model artifacts (docs/design.md §4): a folder with config, safetensors weights, metadata, calibrator, card.

Loading never unpickles anything: weights come from safetensors, everything else from JSON/YAML, and
every failure is an :class:`ArtifactError` with a one-line message naming the file.

Optional extra JSON files (e.g. ``domain.json``, the applicability-domain state of :mod:`sciml.uq.domain`)
are listed with their sha256 in ``metadata.json`` under ``extra_files``; :func:`load_artifact` reads and
verifies exactly the listed ones (an artifact written before extras existed lists none and loads as before;
an unlisted file in the folder is ignored). :func:`add_extra_files` adds extras to an existing artifact without
touching its weights, config or calibrator.
"""

from __future__ import annotations

import json
import platform
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from sciml.core.io.atomic import atomic_directory, default_mode
from sciml.core.io.checksum import sha256_file
from sciml.core.io.shipped import ModelNotFoundError, resolve_model

FORMAT_VERSION = 1
FILES = ("config.yaml", "weights.safetensors", "metadata.json", "calibrator.json", "README.md")
EXTRA_NAME = re.compile(r"[a-z][a-z0-9_]*\.json")  # extra files: lower-case JSON names beside FILES


class ArtifactError(ValueError):
    """A model artifact is missing, corrupted or incompatible (message is one line)."""


@dataclass
class Artifact:
    """The parsed contents of an artifact folder."""

    path: Path
    config: dict
    metadata: dict
    state_dict: dict[str, torch.Tensor]
    calibrator: dict | None
    extras: dict[str, Any] = field(default_factory=dict)  # parsed extra JSON files by name, e.g. "domain.json"


def versions() -> dict[str, str]:
    """Versions of the packages a model depends on (stored in metadata)."""
    import e3nn
    import torch_geometric

    import sciml

    return {"sciml": sciml.__version__, "torch": torch.__version__, "torch_geometric": torch_geometric.__version__,
            "e3nn": e3nn.__version__, "python": platform.python_version()}


def _check_extra_names(extras: Mapping[str, Any]) -> None:
    bad = [n for n in extras if not isinstance(n, str) or not EXTRA_NAME.fullmatch(n) or n in FILES]
    if bad:
        raise ValueError(f"extra artifact files {bad} must be lower-case '<name>.json' names other than {FILES}")


def _write_extras(folder: Path, extras: Mapping[str, Any]) -> dict[str, str]:
    """Write each extra as JSON into ``folder``; return ``{name: sha256}`` for ``metadata.json``."""
    _check_extra_names(extras)
    for name, content in extras.items():
        (folder / name).write_text(json.dumps(content, allow_nan=False))
    return {name: sha256_file(folder / name) for name in sorted(extras)}


def save_artifact(path: str | Path, *, config: dict, state_dict: dict[str, torch.Tensor], metadata: dict,
                  calibrator: dict | None, card: str, extras: Mapping[str, Any] | None = None) -> Path:
    """Write an artifact folder atomically (an existing folder is replaced only once the new one is complete).

    ``extras`` maps extra file names (``"domain.json"``) to JSON-serialisable content (finite numbers only);
    they are written beside the standard files and listed with their sha256 in ``metadata["extra_files"]``.
    """
    from safetensors.torch import save_file

    path = Path(path)
    with atomic_directory(path) as tmp:
        tensors = {k: v.detach().cpu().contiguous().clone() for k, v in state_dict.items()}
        save_file(tensors, str(tmp / "weights.safetensors"))
        (tmp / "weights.safetensors").chmod(default_mode())  # safetensors writes 0600; give what open() would
        meta = {"format_version": FORMAT_VERSION, "versions": versions(), **metadata,
                "weights_sha256": sha256_file(tmp / "weights.safetensors")}
        if extras:
            meta["extra_files"] = _write_extras(tmp, extras)
        (tmp / "metadata.json").write_text(json.dumps(meta, indent=1))
        (tmp / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        (tmp / "calibrator.json").write_text(json.dumps(calibrator))
        (tmp / "README.md").write_text(card)
    return path


def add_extra_files(path: str | Path, extras: Mapping[str, Any], *, metadata: Mapping[str, Any] | None = None,
                    card: str | None = None) -> Path:
    """Add (or replace) extra JSON files of an existing artifact, atomically; weights, config and calibrator stay.

    Parameters
    ----------
    path : str or Path
        Artifact folder (verified with :func:`load_artifact` first).
    extras : mapping
        Extra file name -> JSON-serialisable content (see :func:`save_artifact`).
    metadata : mapping, optional
        Keys to add to or replace in ``metadata.json`` (not ``format_version``, ``weights_sha256``,
        ``extra_files``).
    card : str, optional
        New ``README.md`` (model card); the old one is kept when ``None``.

    """
    art = load_artifact(path)
    reserved = {"format_version", "weights_sha256", "extra_files"} & set(metadata or {})
    if reserved:
        raise ValueError(f"metadata keys {sorted(reserved)} are managed by the artifact writer")
    with atomic_directory(art.path) as tmp:
        for name in FILES:
            if (art.path / name).is_file():
                shutil.copy2(art.path / name, tmp / name)
        kept = {n: art.extras[n] for n in art.extras if n not in extras}
        meta = {**art.metadata, **(metadata or {})}
        meta["extra_files"] = _write_extras(tmp, {**kept, **extras})
        (tmp / "metadata.json").write_text(json.dumps(meta, indent=1))
        if card is not None:
            (tmp / "README.md").write_text(card)
    return art.path


def card_section(card: str, title: str) -> str | None:
    """The body of the ``## title`` section of a Markdown model card (None without one)."""
    lines = card.splitlines()
    if f"## {title}" not in lines:
        return None
    body = []
    for line in lines[lines.index(f"## {title}") + 1:]:
        if line.startswith("## "):
            break
        body.append(line)
    return "\n".join(body)


def with_card_section(card: str, title: str, body: str) -> str:
    """``card`` (Markdown) with its ``## title`` section(s) replaced by one holding ``body``, at the end.

    A section runs from its heading to the next ``## `` heading; refitting an extra file thus replaces its
    section instead of adding another.
    """
    lines, out, skipping = card.splitlines(keepends=True), [], False
    for line in lines:
        if line.startswith("## "):
            skipping = line.rstrip("\n") == f"## {title}"
        if not skipping:
            out.append(line)
    head = "".join(out).rstrip("\n")
    return f"{head}\n\n## {title}\n{body.rstrip()}\n"


def _read_extras(path: Path, metadata: dict) -> dict[str, Any]:
    listed = metadata.get("extra_files", {})
    if not isinstance(listed, dict) or not all(isinstance(n, str) and EXTRA_NAME.fullmatch(n) and n not in FILES
                                               and isinstance(h, str) for n, h in listed.items()):
        raise ArtifactError(f"{path / 'metadata.json'}: 'extra_files' must map '<name>.json' to a sha256; re-export")
    out = {}
    for name, digest in listed.items():
        if not (path / name).is_file():
            raise ArtifactError(f"{path / name}: listed in metadata.json but missing; restore or re-export the model")
        if sha256_file(path / name) != digest:
            raise ArtifactError(f"{path / name}: checksum does not match metadata.json (corrupted or edited file); "
                                "restore or re-export the model")
        out[name] = _read_json(path / name)
    return out


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        reason = f"unreadable or corrupted JSON ({err.__class__.__name__})"
        raise ArtifactError(f"{path}: {reason}; re-export the model") from None


def load_artifact(path: str | Path, task: str | None = None) -> Artifact:
    """Read and verify an artifact folder.

    Parameters
    ----------
    path : str or Path
        Artifact folder, or a shipped model name (:func:`sciml.core.io.shipped.resolve_model`).
    task : str, optional
        The family the caller expects (``config.yaml``'s ``task``: ``crystal``, ``hamiltonian``...).

    Raises
    ------
    ArtifactError
        Unknown model (neither a path nor a shipped name), missing folder or file, corrupted/truncated weights
        (checksum or safetensors header), an unsupported ``format_version``, unreadable JSON/YAML, or an artifact
        of another task.

    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        path = resolve_model(path)
    except ModelNotFoundError as err:
        raise ArtifactError(str(err)) from None
    if not path.is_dir():
        raise ArtifactError(f"{path}: no such model folder (expected a folder with {', '.join(FILES[:3])}; "
                            "create one with `sciml export`)")
    missing = [name for name in FILES[:4] if not (path / name).is_file()]
    if missing:
        raise ArtifactError(f"{path}: not a sciml model folder, missing {', '.join(missing)}")
    metadata = _read_json(path / "metadata.json")
    if not isinstance(metadata, dict) or metadata.get("format_version") != FORMAT_VERSION:
        found = metadata.get("format_version") if isinstance(metadata, dict) else None
        raise ArtifactError(f"{path / 'metadata.json'}: format_version {found!r} is not supported by this "
                            f"sciml (expects {FORMAT_VERSION}); re-export with this version")
    weights = path / "weights.safetensors"
    if metadata.get("weights_sha256") != sha256_file(weights):
        raise ArtifactError(f"{weights}: checksum does not match metadata.json (corrupted or truncated file); "
                            "restore or re-export the model")
    try:
        state_dict = load_file(str(weights))
        # libyaml's parser when present (same SafeConstructor, same result): a Hamiltonian config carries its
        # normalisation statistics (hundreds of kB), which the pure-Python parser reads ten times slower
        config = yaml.load((path / "config.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (SafetensorError, OSError, yaml.YAMLError, UnicodeDecodeError) as err:
        raise ArtifactError(f"{path}: cannot read weights/config ({str(err).splitlines()[0]})") from None
    if not isinstance(config, dict):
        raise ArtifactError(f"{path / 'config.yaml'}: expected a mapping")
    if task is not None and config.get("task") != task:
        raise ArtifactError(f"{path}: task is {config.get('task')!r}, not a {task} model; pass a {task} artifact")
    return Artifact(path, config, metadata, state_dict, _read_json(path / "calibrator.json"),
                    _read_extras(path, metadata))


def parse_extra(art: Artifact, name: str, parse: Callable[[Any], Any], fix: str = "re-export the model") -> Any:
    """``parse(content)`` of the extra file ``name`` (e.g. a family's ``from_dict``), or ``None`` when absent.

    The checksum was verified by :func:`load_artifact`; a content the parser rejects (``ValueError``,
    ``KeyError``, ``TypeError``) becomes a one-line :class:`ArtifactError` naming the file and ``fix``.
    """
    if name not in art.extras:
        return None
    try:
        return parse(art.extras[name])
    except (ValueError, KeyError, TypeError) as err:
        raise ArtifactError(f"{art.path / name}: {err}; {fix}") from None


def restore_module(art: Artifact, build: Callable[..., torch.nn.Module]) -> torch.nn.Module:
    """``build(**art.config["module"])`` with the artifact's weights loaded strictly, in eval mode.

    Parameters
    ----------
    art : Artifact
        A verified artifact (:func:`load_artifact`).
    build : callable
        The family's module class (or a function returning one) taking the ``module`` settings as keywords.

    Raises
    ------
    ArtifactError
        No ``module`` settings, or weights that do not fit the network they describe (missing, unexpected or
        reshaped tensors).

    """
    settings = art.config.get("module")
    if not isinstance(settings, dict):
        raise ArtifactError(f"{art.path / 'config.yaml'}: no 'module' mapping (the network settings); re-export")
    module = build(**settings)
    try:
        module.load_state_dict(art.state_dict, strict=True)
    except RuntimeError as err:
        raise ArtifactError(f"{art.path / 'weights.safetensors'}: weights do not fit the network in config.yaml "
                            f"({str(err).splitlines()[0]})") from None
    return module.eval()
