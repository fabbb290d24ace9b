"""An OpenAI-compatible server elsewhere (vLLM, SGLang, llama.cpp, a gateway): `API_TYPE=openai` with an
OPENAI_BASE_URL that is neither OpenAI's nor this machine's.

It speaks OpenAI's protocol (key, SDK client and endpoint as OpenAI's: openai_wire), but may serve another model under
the same name from one run to the next: it is asked which model it serves (GET /models), and that is part of the
cache key (capjudge.judges.client.served_judges). Whether it has a Batch API is the server's to say.
"""

from __future__ import annotations

from typing import Any

from capjudge.judges.client.backends.openai_wire import OpenAIWireBackend


class CompatibleServer(OpenAIWireBackend):
    name = "compatible"
    has_batch_api = None  # asked by the pre-flight (GET /batches)

    def asks_for_identity(self, config: Any) -> bool:
        return True


COMPATIBLE_SERVER = CompatibleServer()

