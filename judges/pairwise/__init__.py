"""Pairwise judging's floor: versioned pairwise prompt templates, the typed verdict, the arena verdict record."""
