"""Tests of metrics/statistics/: correlations, agreement, bootstraps and judge reliability."""
