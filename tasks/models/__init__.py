"""lmms-eval models capjudge adds (captions_file: judge captions made elsewhere)."""
