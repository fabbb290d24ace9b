"""Tests of the captions_file lmms-eval model (capjudge.models)."""
