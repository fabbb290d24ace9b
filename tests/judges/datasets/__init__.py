"""Tests of judges/datasets/: the rating files and item readers."""
