"""Artifacts and atomic file writing."""
