"""Tests of metrics/files/: reading runs (who judged them, their samples, which run counts)."""
