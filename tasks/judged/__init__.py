"""The task classes lmms-eval loads for the task folders, what they share, and their aggregations."""
