"""The lmms-eval glue: the task classes lmms-eval loads for the task folders, what they share (sources,
settings, who judges), and their aggregations."""
