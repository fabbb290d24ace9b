"""Tests of `capjudge sensitivity`."""
