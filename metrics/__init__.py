"""capjudge.metrics: judge-human correlation, annotator agreement, baselines and leaderboards."""
