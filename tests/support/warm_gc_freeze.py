"""Imported last in tests/support/warm_launch.py's forkserver: moves every object the server's imports built into the
garbage collector's permanent generation (`gc.freeze`, made for servers that fork workers), and lets the children
exit without torch's operator-library finalizers.

A warm child inherits the server's heap: torch, transformers, lmms-eval, capjudge, millions of objects that live
as long as the process. Every full collection in the child walked all of them again (lmms-eval's model cleanup
calls `gc.collect()` twice a run: 1.25 s of CPU in a profile of one warm run of 6.1 s); frozen, they are never
walked, and a collection sees only what the child itself allocated. Nothing the child frees is kept by this:
objects created after the freeze are collected as usual.

torch registers a `weakref.finalize` per operator library it defines at import (~180), run at exit to take the
library's operators out of its dispatcher. In a child they are the server's, and a child's exit ran them all
again on the copied heap (py-spy over the suite: 1.8% of every sample, in `_del_library`). A process about to end
has no use for its dispatcher, so the children skip them; their own finalizers, and every atexit handler, still
run at their exit (warm_launch._exit_like_interpreter).
"""

import gc
import weakref

import torch.library

for _finalizer in list(weakref.finalize._registry):  # the live finalizers (a private registry: read only)
    _found = _finalizer.peek()  # (object, function, args, kwargs) while it is alive
    if _found is not None and _found[1] is torch.library._del_library:
        _finalizer.atexit = False

gc.collect()
gc.freeze()
