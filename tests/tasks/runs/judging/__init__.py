"""Tests of the judging stage: `capjudge judge` (online and Batch), `capjudge estimate` and dry runs."""
