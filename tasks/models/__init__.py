"""capjudge.models (the folder tasks/models): lmms-eval models capjudge adds (captions_file: judge captions made
elsewhere).

`AVAILABLE_MODELS` is lmms-eval's plugin convention: with LMMS_EVAL_PLUGINS=capjudge, lmms-eval 0.7.x imports
`capjudge.models` and registers `capjudge.models.<name>.<ClassName>` for each entry. The `lmms_eval.models`
entry point in pyproject.toml registers the same class without the variable.
"""

AVAILABLE_MODELS = {"captions_file": "CaptionsFile"}
