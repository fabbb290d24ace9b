"""A judge server on this machine: `capjudge serve-local` (the embedded llama.cpp judge, capjudge.judges.local),
or vLLM / llama.cpp / the test server on 127.0.0.1. A compatible server that needs no real key."""

from __future__ import annotations

from typing import Any

from capjudge.judges.client.backends.compatible_server import CompatibleServer


class LocalServer(CompatibleServer):
    name = "local"

    def needs_key(self, config: Any) -> bool:
        return False  # servers on this machine accept any key


LOCAL_SERVER = LocalServer()
