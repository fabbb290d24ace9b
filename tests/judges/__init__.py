"""Tests of judges/: the judges, their client, datasets and the embedded local judge."""
