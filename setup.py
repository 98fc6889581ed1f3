"""Packages of sciml, plus the shipped models and example inputs as package data.

``checkpoints/`` and ``examples/`` live at the top of the repository (where the README's commands name them);
a regular ``pip install .`` copies them into the wheel as ``sciml/_shipped/checkpoints`` and
``sciml/_shipped/examples``, where :func:`sciml.core.io.shipped.shipped_path` finds them when there is no source
tree. Everything else about the package is in ``pyproject.toml``.
"""

from setuptools import find_packages, setup

SHIPPED = {"sciml._shipped.checkpoints": "checkpoints", "sciml._shipped.examples": "examples"}

setup(
    packages=find_packages(include=["sciml", "sciml.*"]) + list(SHIPPED),
    package_dir=SHIPPED,
    package_data={name: ["**/*"] for name in SHIPPED},
    exclude_package_data={name: ["**/__pycache__/*", "**/*.pyc"] for name in SHIPPED},
)
