"""Imported last in tests/support/warm_launch.py's forkserver: moves every object the server's imports built into the
garbage collector's permanent generation (`gc.freeze`, made for servers that fork workers).

A warm child inherits the server's heap: torch, transformers, lmms-eval, capjudge, millions of objects that live
as long as the process. Every full collection in the child walked all of them again (lmms-eval's model cleanup
calls `gc.collect()` twice a run: 1.25 s of CPU in a profile of one warm run of 6.1 s); frozen, they are never
walked, and a collection sees only what the child itself allocated. Nothing the child frees is kept by this:
objects created after the freeze are collected as usual.
"""

import gc

gc.collect()
gc.freeze()
