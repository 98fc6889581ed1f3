"""The ``sciml`` command line (thin shells around library functions)."""
