"""sciml.perturbation.baselines."""
