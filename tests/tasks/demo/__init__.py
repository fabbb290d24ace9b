"""Tests of the committed demo split (tasks/demo/)."""
