"""Tests of tasks/: the lmms-eval glue, the captions_file model, the runs the CLI starts and the CLI itself."""
