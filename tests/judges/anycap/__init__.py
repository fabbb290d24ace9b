"""Tests of judges/anycap/: the AnyCapEval judge, its parser, length rules and word counter."""
