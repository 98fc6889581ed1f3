"""Optional dependencies: import one, or fail with a one-line message naming the package and the extra.

>>> pyscf = require("pyscf", "quantum")  # doctest: +SKIP
>>> h5py = require("h5py", "quantum")  # doctest: +SKIP

A missing module then reads ``needs pyscf: pip install 'sciml[quantum]'`` instead of ``No module named
'pyscf'``. Only the missing module itself is reported this way; an ``ImportError`` raised *inside* an
installed package (a broken install) propagates unchanged, so it is not misdiagnosed as "not installed".
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingDependencyError", "require"]


class MissingDependencyError(ImportError):
    """An optional package is not installed; the message is one line with the ``pip install`` fix."""


def require(module: str, extra: str | None = None, package: str | None = None) -> ModuleType:
    """Import ``module`` (e.g. ``"pyscf.pbc"``) or raise :class:`MissingDependencyError`.

    Parameters
    ----------
    module : str
        Dotted module name to import.
    extra : str, optional
        The ``sciml`` extra that installs it (``"quantum"``, ``"cells"``, ``"bench"``); without one the
        message suggests installing the package itself.
    package : str, optional
        Distribution name on the package index when it differs from the module's top-level name
        (e.g. ``sklearn`` is ``scikit-learn``).

    Returns
    -------
    types.ModuleType
        The imported module.

    Raises
    ------
    MissingDependencyError
        The top-level package of ``module`` is not installed.

    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        top = module.split(".")[0]
        if err.name != top:
            raise  # a submodule or a dependency of an installed package is missing: not ours to rename
        name = package or top
        fix = f"pip install 'sciml[{extra}]'" if extra else f"pip install {name}"
        raise MissingDependencyError(f"needs {name}: {fix}", name=top) from None
