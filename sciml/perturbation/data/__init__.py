"""sciml.perturbation.data."""
