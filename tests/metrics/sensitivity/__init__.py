"""Tests of metrics/sensitivity/: perturbations, shifts and the per-item sensitivity page."""
