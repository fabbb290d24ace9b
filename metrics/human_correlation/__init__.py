"""Judge-human correlation: the human-rated sets (MSVD-Eval, VATEX-EVAL), their protocols, baselines, reports."""
