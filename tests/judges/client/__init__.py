"""Tests of judges/client/: the judge client, its backends, cache, budget, pacing, panel and pre-flight."""
