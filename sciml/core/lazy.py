"""Public names of a package imported on first use (PEP 562), so importing the package stays cheap.

``import sciml.crystal`` (and so the ``sciml`` command's start-up) must not pay for torch, Lightning, pymatgen or
anndata until a model is actually needed; the packages list their public names and where they live instead.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list]]:
    """``(__getattr__, __dir__)`` for ``package`` whose public ``name`` lives in module ``exports[name]``.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    exports : mapping of str to str
        Public name → dotted name of the module that defines it.

    Examples
    --------
    In a package ``__init__``::

        _EXPORTS = {"load_model": "sciml.crystal.artifact"}
        __all__ = sorted(_EXPORTS)
        __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

    """

    def __getattr__(name: str):
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
            setattr(sys.modules[package], name, value)  # cached: later look-ups skip __getattr__
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__


class _PublicNamesWin(types.ModuleType):
    """A package whose public names win over its submodules of the same name (``sciml.crystal.predict``)."""

    def __setattr__(self, name: str, value) -> None:
        exports = vars(self).get("_EXPORTS", {})
        if isinstance(value, types.ModuleType) and value.__name__ == f"{self.__name__}.{name}" and name in exports:
            value = getattr(value, name)  # the import system binds the submodule; the public name wins
        super().__setattr__(name, value)


def keep_public_names(package: str) -> None:
    """Keep ``package.<name>`` the public object of its ``_EXPORTS`` when a submodule ``<name>`` gets imported.

    Importing ``sciml.crystal.predict`` (the module) would otherwise rebind ``sciml.crystal.predict`` (the
    function) to the module.
    """
    sys.modules[package].__class__ = _PublicNamesWin
