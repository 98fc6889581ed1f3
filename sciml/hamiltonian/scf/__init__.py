"""Prediction-time electronic structure: H0 builds, density fitting, Fock builds, refinement, SCF residual.

pyscf (extra ``quantum``) is imported inside the functions that need it, so importing this package is cheap.

- :mod:`.h0`: the zeroth-step Hamiltonian ``H0 = F[ρ_SAD]`` and the Fock solver that builds it (``"full"``/``"fast"``)
- :mod:`.coulomb_fit`: density-fitted Coulomb from ``(ij|P)`` and ``chol(V)``
- :mod:`.numint_cache`: XC integration with the AO grid values kept between builds
- :mod:`.two_grid`: Fock builds on a coarse grid corrected at the density that built H0
- :mod:`.molecule`: a new molecule's ``S``, ``H0`` and Fock builds in a model's basis
- :mod:`.refine`: a few self-consistent Fock builds, each followed by a Newton step; the density of a Hamiltonian
- :mod:`.residual`: the SCF residual ``|F[D(H)] − H|`` and its conformal bound on the H error
- :mod:`.refine_calibration`: per-orbital conformal intervals of refined predictions
"""
