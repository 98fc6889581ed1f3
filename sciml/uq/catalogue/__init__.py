"""Conformal methods of the catalogue: tested and benchmarked (``benchmarks/uq.py``), used by no shipped model.

Online calibrators for streams (ACI, OGD, SF-OGD, PID, COP, UP-OCP), classification scores (LAC, APS, RAPS),
small-sample (SPI), human–AI, label-cost, active PPI, slab coverage, SNAP, fair conformal with learned groups and
reservoir conformal (ResCP). Their names are importable from :mod:`sciml.uq` itself; the methods the families rely
on live one level up (``docs/calibration.md``).
"""
