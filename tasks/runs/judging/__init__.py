"""`capjudge judge` and `capjudge estimate`: judging as its own stage, outside lmms-eval's process_results."""
