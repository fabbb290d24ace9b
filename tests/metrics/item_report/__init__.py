"""Tests of metrics/item_report/: `capjudge report`, the per-item page."""
