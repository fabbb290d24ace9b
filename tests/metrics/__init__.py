"""Tests of metrics/: statistics, human correlation, leaderboards, item reports, sensitivity and run files."""
