"""Run files: reading lmms-eval and capjudge outputs (runs, JSON Lines, item values), writing outputs safely."""
