"""Statistics: correlation coefficients, bootstrap intervals, comparisons, annotator agreement, judge noise."""
