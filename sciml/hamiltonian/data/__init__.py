"""Hamiltonian data: npz and DeepH readers/writers, pyscf generators, molecule and crystal samples, the data module."""
