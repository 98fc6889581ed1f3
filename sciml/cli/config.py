"""Load YAML configs, apply dotted command-line overrides (``--trainer.devices 2``), check run configs."""

from __future__ import annotations

from pathlib import Path

import yaml


def load_config(path: str | Path) -> dict:
    """Read a YAML config; a missing or malformed file is a one-line ``ValueError``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such config file")
    try:
        cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text file (binary content); a config is a YAML text file") from None
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: invalid YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: a config must be a YAML mapping")
    return cfg


def apply_overrides(cfg: dict, tokens: list[str]) -> dict:
    """Apply ``--a.b.c value`` / ``--a.b.c=value`` tokens (values parsed as YAML) to ``cfg`` in place."""
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--") or token == "--":
            raise ValueError(f"unexpected argument {token!r}; overrides look like --trainer.max_epochs 5")
        if "=" in token:
            key, raw = token[2:].split("=", 1)
            i += 1
        else:
            if i + 1 >= len(tokens):
                raise ValueError(f"override {token} needs a value")
            key, raw = token[2:], tokens[i + 1]
            i += 2
        node = cfg
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"override --{key}: {part!r} is not a section of the config")
        node[leaf] = yaml.safe_load(raw)
    return cfg


def load_run_config(path: str | Path, overrides: list[str]) -> dict:
    """The run config at ``path`` with ``overrides`` applied, checked against the schema before anything runs.

    See :func:`sciml.core.config.check_config`: unknown keys (with the closest valid one), refused ``trainer``
    keys and a missing ``data.path`` (with the hint in the config's ``data.path`` comment) are one-line errors.
    """
    from sciml.core.config import check_config

    return check_config(apply_overrides(load_config(path), overrides), source=path)


def check_alpha_arg(alpha: float | None, flag: str = "--alpha") -> None:
    """Raise ``ValueError`` naming ``flag`` unless the level is None or in the open interval (0, 1).

    For miscoverage ``--alpha`` and the domain flag level ``--beta`` alike.
    """
    if alpha is not None and not 0 < alpha < 1:
        raise ValueError(f"{flag} must lie in (0, 1), got {alpha}")
