"""sciml.perturbation.sim."""
