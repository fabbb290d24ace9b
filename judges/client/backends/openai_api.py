"""OpenAI's own API (`API_TYPE=openai`, the default, with no OPENAI_BASE_URL or one at api.openai.com).

`API_TYPE=openai` also names any OpenAI-compatible server (OPENAI_BASE_URL pointing at vLLM, SGLang, llama.cpp):
`select` hands such a configuration to the compatible-server backend, or to the local one for a server on this
machine. Key, endpoint and SDK client are the same for all three (openai_wire).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from capjudge.judges.client.backends.compatible_server import COMPATIBLE_SERVER
from capjudge.judges.client.backends.local_server import LOCAL_SERVER
from capjudge.judges.client.backends.openai_wire import OpenAIWireBackend
from capjudge.judges.client.backends.protocol import JudgeBackend
from capjudge.judges.client.endpoints import is_loopback

OPENAI_HOST = "api.openai.com"


class OpenAIApi(OpenAIWireBackend):
    name = "openai"

    def select(self, config: Any) -> JudgeBackend:
        if not config.base_url:
            return self
        host = urlparse(config.base_url).hostname or ""
        # Every name of this machine (localhost., 127.0.0.2, ::ffff:127.0.0.1), as `endpoint_identity` spells it.
        if is_loopback(host.rstrip(".")):
            return LOCAL_SERVER
        return self if host == OPENAI_HOST else COMPATIBLE_SERVER

    def asks_for_identity(self, config: Any) -> bool:
        # OpenAI's names are dated snapshots: it is asked nothing, and its keys never change.
        return False


OPENAI_API = OpenAIApi()
