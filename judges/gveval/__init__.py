"""G-VEval's ACCR video judge: the published prompt, its frame strip, and its reply parser."""
