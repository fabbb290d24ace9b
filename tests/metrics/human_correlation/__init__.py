"""Tests of metrics/human_correlation/: `capjudge correlate`, VATEX-EVAL and the classic baselines."""
