"""The `capjudge` command line: one module per command, assembled in main.py."""
