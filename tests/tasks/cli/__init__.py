"""Tests of the `capjudge` command line: its layout, its README reference and its bounds."""
