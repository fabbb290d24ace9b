"""The process-wide judge clients, one per configuration, and what happens to them across a fork.

Every task and thread of a process shares one client per configuration, so they share its concurrency
bound, its reply cache connection and its connection pool. The judging stage forks worker processes; a
client must not cross a fork (see `release_shared_clients` and `_forget_inherited_clients`).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from capjudge.judges.client.config import JudgeConfig
from capjudge.judges.client.judge_client import JudgeClient

_shared: dict[JudgeConfig, JudgeClient] = {}
_shared_lock = threading.Lock()


def release_shared_clients() -> None:
    """Close every process-wide client (their queued replies written, their files closed); the next
    `shared_client` call builds a new one. The judging stage calls it before forking workers: SQLite's rule
    is that no connection may be open across a fork (a child's new connections would share the parent's
    lock bookkeeping), and nothing may be queued for a writer thread the child would not have."""
    with _shared_lock:
        clients = list(_shared.values())
        _shared.clear()
    for client in clients:
        client.close()


def _forget_inherited_clients() -> None:
    """In a forked child (the judging stage's worker processes): the parent's clients are not usable here
    (their writer thread does not exist in the child), so the child builds its own on first use."""
    global _shared_lock
    _shared.clear()
    _shared_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_inherited_clients)


def shared_client(config: JudgeConfig | None = None, **overrides: Any) -> JudgeClient:
    """The process-wide client for `config` (default: from the environment, with `overrides`)."""
    config = config or JudgeConfig.from_env(**overrides)
    with _shared_lock:
        client = _shared.get(config)
        if client is None:
            client = _shared[config] = JudgeClient(config)
        return client
