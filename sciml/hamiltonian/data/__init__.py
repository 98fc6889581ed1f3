"""sciml.hamiltonian.data.datamodule."""
