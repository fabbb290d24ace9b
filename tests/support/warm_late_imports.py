"""Imported in tests/support/warm_launch.py's forkserver: modules every warm run used to import only once it ran, so
each paid for them again (a profile of one warm run of the two demo tasks: 6.1 s of CPU, 2.3 s of it these).

- lmms-eval's `stderr_for_metric` imports two of its own task modules at every aggregation (they bring nltk
  and scikit-learn);
- lmms-eval prints its results table with pytablewriter;
- the openai SDK imports its resources on a client's first use (`client.chat`, and `chat.completions` with its
  streaming helpers), httpx its transport (httpcore) on the first connection, the SDK its JSON parser (jiter) on
  the first reply.

lmms-eval itself guards the first two with `except Exception` (a broken optional dependency may raise more
than ImportError); so does this module: a module that does not import here is left to the run, which then
meets it as a cold run would. (multiprocessing's forkserver stops at any other exception of a preload.)
"""

import importlib

LATE_IMPORTS = ("lmms_eval.tasks.amber_g.utils", "lmms_eval.tasks.coco_cap_chair.utils", "pytablewriter",
                "openai.resources", "openai.resources.chat.chat", "openai.resources.chat.completions.completions",
                "httpcore", "jiter")

for _name in LATE_IMPORTS:
    try:
        importlib.import_module(_name)
    except Exception:  # noqa: BLE001, S112 - see the docstring
        continue
