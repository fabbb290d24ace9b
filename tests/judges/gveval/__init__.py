"""Tests of judges/gveval/: the G-VEval judge and its parser."""
