"""capjudge.judges: the judge client, the two rubric judges and their parsers."""
