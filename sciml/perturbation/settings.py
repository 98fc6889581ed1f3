r"""The prior of the perturbation flow model as one typed value: :class:`PriorSettings` (``model.flow`` keys).

The prior mean of a condition is the effect the flow starts from (:func:`sciml.perturbation.prior.prior_mean`);
twelve ``model.flow`` keys say how it is formed and used. Each is a field here with its type, default, meaning
and range, stated once: ``sciml/perturbation/schema.py`` builds its config keys from these fields, and
:meth:`PriorSettings.__post_init__` is the one place where values and their combinations are checked (when the
config is read by ``sciml fit``, and when a checkpoint or artifact is loaded).

A field typed ``float | "auto"`` is chosen per screen when the model is built
(:func:`sciml.perturbation.select.resolve`); until then ``auto`` counts as the value named by
:attr:`PriorSettings.kappa_value`, :attr:`~PriorSettings.tau` and :attr:`~PriorSettings.rule_weight`.

Torch-free (read by ``sciml fit --help`` and the config check).

>>> PriorSettings(prior="masking", kappa="auto", denoise="eb_joint").auto
('kappa',)
>>> PriorSettings(blend=0.5)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
sciml.core.schema.ConfigError: flow.blend 0.5 averages the masking prior with the combination rule; it needs ...
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from sciml.core.schema import ConfigError

__all__ = ["AUTO", "DENOISER_NAMES", "JOINT", "PRIOR_FIELDS", "PriorSettings"]

Kind = Literal["additive", "combination", "masking"]
OwnGenes = Literal["rule", "additive"]
Denoiser = Literal["eb", "eb_single", "eb_joint"]
AUTO = "auto"
DENOISER_NAMES: tuple[str, ...] = get_args(Denoiser)  # empirical-Bayes shrinkage of the singles (nn.shrinkage)
JOINT = "eb_joint"  # the singles estimated jointly with the training doubles first (nn.joint)


def _field(default: Any, help: str, kind: str, choices: tuple = (), low: float | None = None,
           high: float | None = None, open_high: bool = False) -> Any:
    """A settings field: default, meaning, config kind (``sciml.core.schema.Key``), choices and numeric range."""
    return field(default=default, metadata={"help": help, "kind": kind, "choices": choices, "low": low,
                                            "high": high, "open_high": open_high})


@dataclass(frozen=True)
class PriorSettings:
    """How the prior mean of a condition is formed and used (module docstring); frozen, checked when made.

    Attributes
    ----------
    prior : {"additive", "combination", "masking"}
        Prior mean of a double with both singles known: ``Δa + Δb``; the per-gene combination rule
        (:mod:`sciml.perturbation.nn.combination`) shrunk towards additive by ``shrink``; or the masking prior
        (:mod:`sciml.perturbation.nn.masking`) with ``kappa`` and ``denoise``.
    shrink : float in [0, 1] or "auto"
        ``λ`` of ``Δa + Δb + λ·(rule − Δa − Δb)`` (``auto``: 1 until chosen on val).
    kappa : float in [0, 1] or "auto"
        Masking: share of the smaller same-sign single absorbed (``auto``: 0 until chosen).
    denoise : float >= 0, "auto", "eb", "eb_single" or "eb_joint"
        Masking: the James–Stein threshold ``τ`` on the singles (``auto``: 0 until chosen), or empirical-Bayes
        shrinkage of the singles (:mod:`sciml.perturbation.nn.shrinkage`): one prior for all (``eb``), one per
        single (``eb_single``), one per single of the singles estimated with the training doubles (``eb_joint``).
    blend : float in [0, 1]
        Masking: ``w·masking + (1 − w)·combination`` (1: the masking prior alone).
    own_genes : {"rule", "additive"}
        The perturbed genes' own columns of a double: from the rule, or their singles' sum.
    closure : bool or "auto"
        Masking: rescale the prior mean of a double to the controls' total per cell (``auto``: on when the data
        are closed, resolved at build; ``true``: required).
    additive_fallback : bool
        Generated mean = the additive baseline's (set at export when the model does not beat it on val).
    exact_mean : bool
        Generated mean = the prior mean for every condition whose singles are all known.
    remainder_mean : float in [0, 1]
        Weight ``w`` of the network's mean velocity where every single is known (0: the mean is the prior's).
    additive_skip : bool
        Add the prior mean to the velocity (control path): the network learns the remainder.
    prior_dropout : float in [0, 1)
        Chance that a known single effect is hidden from the network during training.

    """

    prior: Kind = _field("additive", "prior mean of a double", "str", get_args(Kind))
    shrink: float | Literal["auto"] = _field(1.0, "weight λ of the combination rule over additive (auto: chosen "
                                             "on val)", "float|auto", low=0.0, high=1.0)
    kappa: float | Literal["auto"] = _field(0.0, "masking prior: share of the smaller same-sign single absorbed "
                                            "(auto: chosen)", "float|auto", low=0.0, high=1.0)
    denoise: float | Literal["auto"] | Denoiser = _field(
        0.0, "masking prior: James-Stein τ on the singles (auto: chosen), or empirical Bayes: eb (one prior), "
        "eb_single (one per single), eb_joint (singles fitted with the training doubles first)",
        "|".join(("float", AUTO, *DENOISER_NAMES)), low=0.0)
    blend: float = _field(1.0, "masking prior: its weight against the combination rule (1: masking alone)", "float",
                          low=0.0, high=1.0)
    own_genes: OwnGenes = _field("rule", "perturbed genes' own columns of a double", "str", get_args(OwnGenes))
    closure: bool | Literal["auto"] = _field(False, "masking prior rescaled to the controls' total per cell "
                                             "(auto: when the data are closed)", "bool|auto")
    additive_fallback: bool = _field(False, "generated mean = additive prior (set at export when not better on "
                                     "val)", "bool")
    exact_mean: bool = _field(False, "generated mean = prior mean where every single is known", "bool")
    remainder_mean: float = _field(1.0, "weight w of the network's mean velocity where every single is known",
                                   "float", low=0.0, high=1.0)
    additive_skip: bool = _field(True, "add the prior mean to the velocity", "bool")
    prior_dropout: float = _field(0.2, "chance to hide a known single effect in training", "float", low=0.0,
                                  high=1.0, open_high=True)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _checked(f, getattr(self, f.name)))
        if self.blend < 1.0 and self.prior != "masking":
            raise ConfigError(f"flow.blend {self.blend:g} averages the masking prior with the combination rule; it "
                              f"needs flow.prior: masking, not {self.prior!r} (or set blend: 1)")
        if self.closure is True and self.prior != "masking":
            raise ConfigError(f"flow.closure true rescales the masking prior; it needs flow.prior: masking, not "
                              f"{self.prior!r} (or set closure: false)")

    @classmethod
    def from_flow(cls, flow: Mapping[str, Any] | None) -> PriorSettings:
        """The settings among the keys of a ``model.flow`` mapping (other keys are ignored; absent: default)."""
        flow = flow or {}
        return cls(**{name: flow[name] for name in PRIOR_FIELDS if name in flow})

    def to_flow(self) -> dict[str, Any]:
        """The ``model.flow`` keys of these settings (what a checkpoint or artifact config records)."""
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> PriorSettings:
        """A copy with ``changes`` (checked like any other)."""
        return dataclasses.replace(self, **changes)

    @property
    def auto(self) -> tuple[str, ...]:
        """Names of the fields still ``auto`` (chosen when the model is built)."""
        return tuple(f.name for f in dataclasses.fields(self) if getattr(self, f.name) == AUTO)

    @property
    def uses_rule(self) -> bool:
        """The prior mean reads a fitted combination rule: ``prior: combination``, or masking blended with it."""
        return self.prior == "combination" or self.blend < 1.0

    @property
    def rule_weight(self) -> float:
        """``λ`` of the combination rule over additive (0 under ``additive_fallback``; ``auto`` not chosen: 1)."""
        if self.additive_fallback:
            return 0.0
        return 1.0 if self.shrink == AUTO else float(self.shrink)

    @property
    def kappa_value(self) -> float:
        """``κ`` (``auto`` not chosen: 0)."""
        return 0.0 if self.kappa == AUTO else float(self.kappa)

    @property
    def empirical_bayes(self) -> bool:
        """``denoise`` names an empirical-Bayes shrinkage of the singles (not a threshold ``τ``)."""
        return self.denoise in DENOISER_NAMES

    @property
    def tau(self) -> float:
        """The James–Stein threshold ``τ`` (``auto`` not chosen, or empirical Bayes: 0)."""
        return 0.0 if self.denoise == AUTO or self.empirical_bayes else float(self.denoise)

    @property
    def closed(self) -> bool:
        """The closure is on (``closure: auto`` counts as off until resolved on the data)."""
        return self.closure is True


PRIOR_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(PriorSettings))
"""The ``model.flow`` keys that :class:`PriorSettings` holds."""


def _checked(f: dataclasses.Field, value: Any) -> Any:
    """``value`` of field ``f`` checked against its kind, choices and range; numbers as float."""
    meta = f.metadata
    base, *words = meta["kind"].split("|")
    if value in words:
        return value
    if base == "bool":
        if not isinstance(value, bool):
            allowed = "true or false" + "".join(f" or {w}" for w in words)
            raise ConfigError(f"flow.{f.name} is {value!r}; use {allowed}")
        return value
    if base == "str":
        if value not in meta["choices"]:
            raise ConfigError(f"flow.{f.name} is {value!r}; choose one of {list(meta['choices'])}")
        return value
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ConfigError(f"flow.{f.name} is {value!r}; use a number{_range(meta)}"
                          + "".join(f" or {w}" for w in words))
    value = float(value)
    low, high = meta["low"], meta["high"]
    if (low is not None and value < low) or (high is not None and (value >= high if meta["open_high"]
                                                                   else value > high)):
        raise ConfigError(f"flow.{f.name} is {value:g}; use a number{_range(meta)}"
                          + "".join(f" or {w}" for w in words))
    return value


def _range(meta: Mapping[str, Any]) -> str:
    low, high = meta["low"], meta["high"]
    if high is None:
        return f" >= {low:g}" if low is not None else ""
    return f" in [{low:g}, {high:g}{')' if meta['open_high'] else ']'}"
