"""Electronic-structure Hamiltonians: orbital layout, data, equivariant model, prediction."""
