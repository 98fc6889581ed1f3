"""The schema mechanism of run configs: a :class:`Key` per setting, a :class:`Section` per mapping, and checks.

A family describes its settings as a mapping of keys and sections (``sciml/<family>/schema.py``);
:func:`check_section` checks a config node against one and returns a checked copy. Every error is one line
(:class:`ConfigError`) naming the dotted key, the value and the fix: an unknown key (with the closest valid one),
a wrong type, a value outside its choices (with the closest choice), a missing required key, a retired key and
why. :func:`describe_keys` writes one line per key for ``sciml fit --help``. Imports neither torch nor any family.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ConfigError", "Key", "Section", "check_section", "closest", "describe_keys", "split_section"]


class ConfigError(ValueError):
    """A run config a user wrote is wrong; the message is one line naming the key and the fix."""


@dataclass(frozen=True)
class Key:
    """One setting: default, meaning, and what values it takes.

    ``kind`` is ``bool``, ``int``, ``float``, ``str``, ``list``, ``map`` (free-form mapping) or ``any``; empty:
    the type of ``default`` (``any`` when the default is ``None``); ``"float|auto"`` takes a float or the word
    ``auto`` (any base type, any ``|``-separated literal words). ``None`` is accepted when the default is
    ``None`` or ``nullable`` is set.
    """

    default: Any = None
    help: str = ""
    kind: str = ""
    choices: tuple = ()
    required: bool = False
    nullable: bool = False

    @property
    def type_name(self) -> str:
        if self.kind:
            return self.kind
        return {bool: "bool", int: "int", float: "float", str: "str", list: "list"}.get(type(self.default), "any")


@dataclass(frozen=True)
class Section:
    """A mapping of settings; ``by`` names the key whose value picks extra keys from ``variants``."""

    keys: Mapping[str, Key | Section]
    help: str = ""
    nullable: bool = False  # ``null`` switches the part off (Hamiltonian ``model.ridge``)
    by: str | None = None
    variants: Mapping[str, Mapping[str, Key]] = field(default_factory=dict)
    open: bool = False  # other keys pass (``trainer``: checked against lightning.Trainer by check_trainer_keys)
    retired: Mapping[str, str] = field(default_factory=dict)  # keys that no longer exist: why


def split_section(fractions: list, seed: int, **extra: Key) -> Section:
    """The ``data.split`` section of every family: shares, seed and the family's ``extra`` keys."""
    return Section({"fractions": Key(fractions, "train, val, calib, test shares (calib: conformal only)"),
                    "seed": Key(seed, "seed of the random split"), **extra}, "seeded split, written to split.json")


def closest(word: str, options) -> str:
    """``"; did you mean 'x'?"`` naming the option closest to ``word``, or ``""`` when none is close."""
    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.5)
    return f"; did you mean {match[0]!r}?" if match else ""


def _value(value: Any, key: Key, where: str) -> Any:
    """``value`` checked against ``key`` (numbers YAML left as strings converted)."""
    if value is None:
        if (key.default is None or key.nullable) and not key.required:
            return None
        raise ConfigError(f"config key {where!r} needs a value ({key.help})")
    kind = key.type_name
    if "|" in kind:  # "float|auto": a value of the base type, or one of the literal words
        base, *words = kind.split("|")
        if value in words:
            return value
        try:
            return _value(value, Key(key.default, key.help, base, key.choices), where)
        except ConfigError:
            raise ConfigError(f"config key {where!r} is {value!r}; expected a {base} or one of {words}"
                              f"{closest(str(value), words)} ({key.help})") from None
    if kind in ("float", "int") and isinstance(value, str):
        try:
            value = float(value) if kind == "float" else int(value)
        except ValueError:
            pass
    ok = {"bool": isinstance(value, bool), "int": isinstance(value, int) and not isinstance(value, bool),
          "float": isinstance(value, int | float) and not isinstance(value, bool), "str": isinstance(value, str),
          "list": isinstance(value, list | tuple), "map": isinstance(value, Mapping)}.get(kind, True)
    if not ok:
        raise ConfigError(f"config key {where!r} is {value!r}; expected a value of type {kind} ({key.help})")
    if key.choices and value not in key.choices:
        raise ConfigError(f"config key {where!r} is {value!r}; choose one of {list(key.choices)}"
                          f"{closest(str(value), key.choices)}")
    return value


def check_section(node: Any, section: Section, where: str) -> Any:
    """``node`` checked against ``section``: unknown keys, types, choices, required keys (a checked copy)."""
    if node is None:
        return None if section.nullable else {}
    if not isinstance(node, Mapping):
        raise ConfigError(f"config section {where!r} must be a mapping of settings, got {node!r}")
    keys = dict(section.keys)
    if section.by is not None:
        choice = node.get(section.by, section.keys[section.by].default)
        keys |= section.variants.get(choice, {})
    out = {}
    for name, value in node.items():
        dotted = f"{where}.{name}" if where else str(name)
        spec = keys.get(name)
        if spec is None and section.open:
            out[name] = value
            continue
        if spec is None and name in section.retired:
            raise ConfigError(f"config key {dotted!r} is retired ({section.retired[name]}): remove it")
        if spec is None:
            owner = [v for v, extra in section.variants.items() if name in extra]
            if owner:
                raise ConfigError(f"config key {dotted!r} is not a setting of {section.by} {choice!r} (it belongs to "
                                  f"{', '.join(map(repr, owner))}); settings: {', '.join(sorted(keys))}")
            valid = [f"{where}.{k}" if where else k for k in keys]
            hint = closest(dotted, valid) or f"; valid keys{f' in {where!r}' if where else ''}: {', '.join(keys)}"
            raise ConfigError(f"unknown config key {dotted!r}{hint}")
        out[name] = check_section(value, spec, dotted) if isinstance(spec, Section) else _value(value, spec, dotted)
    for name, spec in keys.items():
        if getattr(spec, "required", False) and name not in node:
            raise ConfigError(f"config key {(f'{where}.{name}' if where else name)!r} is missing ({spec.help})")
    return out


def describe_keys(keys: Mapping[str, Key | Section], prefix: str) -> list[str]:
    """One line per key (``name = default  help [choices]``), a section's own keys before its subsections."""
    out = []
    for name, spec in keys.items():
        if isinstance(spec, Key):
            value = "(required)" if spec.required else f"= {_yaml(spec.default)}"
            choices = f" [{' | '.join(spec.choices)}]" if spec.choices else ""
            out.append(f"  {f'{prefix}{name} {value}':<46} {spec.help}{choices}")
    for name, spec in keys.items():
        if isinstance(spec, Section):
            if spec.help or spec.nullable:
                out.append(f"  {prefix}{name}: {spec.help}{' (default null)' if spec.nullable else ''}")
            out += describe_keys(spec.keys, f"{prefix}{name}.")
            for variant, extra in spec.variants.items():
                out.append(f"  {prefix}{name} with {spec.by}: {variant}:")
                out += describe_keys(extra, f"{prefix}{name}.")
    return out


def _yaml(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if value == "":
        return '""'
    return str(value)


