"""Tests of the lmms-eval glue: the judged tasks run by real lmms-eval, their loaders and metrics."""
