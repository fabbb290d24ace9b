"""AnyCapEval's video style judge: the published prompt, its reply parser, and the length rules in code."""
