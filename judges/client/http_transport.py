"""An httpx transport that gives each thread its own small connection pool.

The judge client sends from up to `max_concurrency` threads at once, each with one request in flight. With
one shared pool of that many connections, httpcore assigns every request by walking all its connections and
queued requests (checking each for idleness) under one lock, on every send and every release: at 64 in
flight that walk was a quarter of the client's CPU per request (profiled), and the client is bound by one
core's worth of Python (the GIL). A thread that only ever has one request open needs one connection, so each
thread gets a pool of its own and the walk is over one entry.

The semantics are httpx's own: the same timeouts, TLS settings, HTTP/1.1 keep-alive and proxies from the
environment (the outer `httpx.Client` mounts those); only the pooling is per thread.
"""

from __future__ import annotations

import functools
import os
import ssl
import threading
import weakref
from typing import Any

import httpx


class _ThreadsTransport:
    """Lives in one thread's local storage, so it goes when the thread ends (and its transport is closed)."""

    __slots__ = ("transport", "__weakref__")

    def __init__(self, transport: httpx.HTTPTransport):
        self.transport = transport


def _tls_context(verify: Any, cert: Any, trust_env: bool) -> ssl.SSLContext:
    """httpx's TLS context for these settings, built once per process: every judge client of a process (a
    panel's members, each `JudgeClient` a notebook or a test makes) would otherwise load the CA bundle again.
    The environment's CA settings that httpx reads are part of the key; settings that cannot be a key
    (an unhashable `cert`) get a context of their own."""
    bundle = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")) if trust_env else None
    try:
        return _shared_tls_context(verify, cert, trust_env, bundle)
    except TypeError:  # unhashable settings
        return httpx.create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)


@functools.lru_cache(maxsize=8)
def _shared_tls_context(verify: Any, cert: Any, trust_env: bool, bundle: tuple[str | None, str | None] | None) -> ssl.SSLContext:
    return httpx.create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)


class PerThreadTransport(httpx.BaseTransport):
    def __init__(self, *, verify: Any = True, cert: Any = None, trust_env: bool = True, **transport_options: Any):
        # One TLS context for every thread's transport: httpx builds one per transport otherwise, loading the
        # CA bundle each time (22 ms of CPU measured), and 64 threads starting together spent over a second
        # under the GIL on it before their first requests went out.
        tls = verify if isinstance(verify, ssl.SSLContext) else _tls_context(verify, cert, trust_env)
        # One connection per thread, kept alive between its requests; a second for the moment a broken
        # keep-alive connection is being replaced.
        self._options = {"limits": httpx.Limits(max_connections=2, max_keepalive_connections=1), "verify": tls,
                         "trust_env": trust_env, **transport_options}
        self._local = threading.local()
        self._transports: list[httpx.HTTPTransport] = []
        self._lock = threading.Lock()
        self._closed = False

    def _own_transport(self) -> httpx.HTTPTransport:
        owned = getattr(self._local, "owned", None)
        if owned is None:
            with self._lock:
                if self._closed:
                    raise RuntimeError("the transport has been closed")
                transport = httpx.HTTPTransport(**self._options)
                self._transports.append(transport)
            owned = self._local.owned = _ThreadsTransport(transport)
            # Thread pools come and go (one per task in a harness run): a finished thread's idle connection
            # is closed then, not kept open until the client closes.
            weakref.finalize(owned, self._release, transport)
        return owned.transport

    def _release(self, transport: httpx.HTTPTransport) -> None:
        with self._lock:
            if transport in self._transports:
                self._transports.remove(transport)
        transport.close()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._own_transport().handle_request(request)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            transports, self._transports = self._transports, []
        for transport in transports:
            transport.close()
