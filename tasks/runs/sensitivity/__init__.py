"""`capjudge sensitivity`: a judge's judgments of captions and their controlled perturbations (issue #39)."""
