"""Energy units of the Hamiltonian family (matrices are stored in Hartree)."""

#: 1 Hartree in eV (CODATA 2018)
HARTREE_EV = 27.211386245988
#: 1 Hartree in meV
HARTREE_MEV = 1000 * HARTREE_EV
