"""Tests of capjudge.api, the public Python API."""
