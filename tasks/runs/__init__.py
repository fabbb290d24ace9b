"""The runs the `capjudge` commands start, below their argument parsing: judging as its own stage (judging/),
sensitivity (sensitivity/), the arena's pairwise judging (arena/) and the demo pipeline (demo_pipeline.py)."""
