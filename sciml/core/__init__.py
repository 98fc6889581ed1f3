"""sciml.core."""
