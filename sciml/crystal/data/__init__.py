"""sciml.crystal.data."""
