"""Runs of capjudge that judge outside lmms-eval, each in a package of its own."""
