"""Tests of the runs the CLI starts: the demo pipeline here, the judging stage and sensitivity in their folders."""
