"""Tests of metrics/leaderboard/: `capjudge leaderboard` and its files."""
