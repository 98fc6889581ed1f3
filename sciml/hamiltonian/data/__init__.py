"""Hamiltonian data: npz and DeepH readers/writers, pyscf generators, molecule and crystal samples, batches, the data module."""
