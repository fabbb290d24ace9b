"""Where a judge is, as text: endpoint URLs shown without credentials (`public_url`), spelled one way per server
(`normalised_url`), this machine under any of its names (`is_loopback`), and the ConfigError every judge setting
raises. Below both capjudge.judges.client.config and the backends (capjudge.judges.client.backends), which
build their endpoint labels and identities from it.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

DEFAULT_AZURE_API_VERSION = "2024-10-21"
OPENAI_URL = "https://api.openai.com/v1"
# Servers on this machine (llama.cpp, vLLM, the test server) accept any key; OpenAI and Azure do not.
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}
# A query parameter whose name holds one of these carries a credential (`?api-key=`, `?key=`, `?token=`,
# `?sig=`): it is left out wherever an endpoint is shown. Others (Azure's `api-version`) are kept.
CREDENTIAL_PARAM_WORDS = ("key", "token", "secret", "pass", "pwd", "auth", "sig", "credential", "session")


class ConfigError(ValueError):
    """A judge setting is missing or wrong. Raised once, before any item is judged."""




def public_url(url: str) -> str:
    """`url` as it may be shown or recorded: no userinfo (`user:pass@`), no credential query parameters."""
    parts = urlsplit(url)
    if not parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    query = urlencode([(name, value) for name, value in parse_qsl(parts.query, keep_blank_values=True)
                       if not is_credential_param(name)])
    return urlunsplit((parts.scheme, host, parts.path, query, parts.fragment))


DEFAULT_PORTS = {"http": 80, "https": 443}


def normalised_url(url: str) -> str:
    """Where a judge's requests go, spelled one way per server, so that two spellings of one server are seen
    as one: scheme and host in lower case, the default port written out, every loopback name as 127.0.0.1
    (see `is_loopback`), no trailing slash, no credentials (userinfo, `?api-key=`). Each backend builds its
    `endpoint_identity` from it (Azure's prefixed `azure:`)."""
    parts = urlsplit(public_url(url.strip()))
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").rstrip(".")  # `hostname` is already lower case; "localhost." is localhost
    if is_loopback(host):
        host = "127.0.0.1"
    try:
        port = parts.port or DEFAULT_PORTS.get(scheme)
    except ValueError:  # not a port number: the URL is kept as written (it cannot reach a server anyway)
        return public_url(url.strip()).lower()
    netloc = f"[{host}]" if ":" in host else host
    if port:
        netloc += f":{port}"
    return urlunsplit((scheme, netloc, parts.path.rstrip("/"), parts.query, ""))


def is_loopback(host: str) -> bool:
    """This machine, under any of its names: `localhost` (and `*.localhost`, RFC 6761), 0.0.0.0 (which
    connects here on Linux), 127.0.0.0/8 and ::1. A client's resolver picks the IPv4 or IPv6 loopback for
    `localhost`, so which of them a server listens on cannot tell two local judges apart."""
    if host in LOOPBACK_HOSTS or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return address.is_loopback or address.is_unspecified or bool(mapped and mapped.is_loopback)


def is_credential_param(name: str) -> bool:
    return any(word in name.lower() for word in CREDENTIAL_PARAM_WORDS)


def normalise_base_url(url: str) -> str:
    """Accept lmms-eval's full endpoint URL as well as an API root."""
    url = url.rstrip("/")
    suffix = "/chat/completions"
    return url[: -len(suffix)] if url.endswith(suffix) else url
