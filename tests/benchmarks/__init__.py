"""`make bench` and the local-judge benchmarks; run from the checkout's root as `python -m tests.benchmarks.<name>`."""
