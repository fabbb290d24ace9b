"""capjudge as a user gets it: the wheel in a fresh venv, the README's examples and its "A third judge" list."""
