"""Tests of judges/local/: the embedded llama.cpp judge."""
