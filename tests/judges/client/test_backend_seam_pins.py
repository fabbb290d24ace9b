"""Persisted formats pinned across the backend seam (issue 48): the values below were computed on the snapshot
before `capjudge.judges.client.backends` existed. A cache key, a budget folder name, an endpoint label or a
redaction that changes here orphans every cache and budget folder users already have. (The redaction lists
have since gained each credential's hex forms, every earlier entry kept: a server echoing the key as hex bytes
got it onto disk.)"""

from __future__ import annotations

import pytest

from capjudge.judges.client.budget import judge_budget_folder
from capjudge.judges.client.cache import request_key
from capjudge.judges.client.config import JudgeConfig
from capjudge.judges.client.redaction import config_redactions
from capjudge.judges.client.served_judges import asks_for_identity

CASES = {
    "openai": dict(OPENAI_API_KEY="sk-test-0123456789abcdefghij", MODEL_VERSION="gpt-4o-2024-08-06"),
    "compatible": dict(OPENAI_API_KEY="EMPTY", MODEL_VERSION="Qwen/Qwen2-VL-7B", OPENAI_BASE_URL=(
        "https://user:pw12345678@vllm.example.org:8443/v1/chat/completions?api-key=abcdef1234567890")),
    "local": dict(OPENAI_BASE_URL="http://localhost:8080/v1/", MODEL_VERSION="gemma-3-270m"),
    "azure": dict(API_TYPE="AZURE", AZURE_OPENAI_API_KEY="0123456789abcdef0123456789abcdef",
                  AZURE_OPENAI_ENDPOINT="https://name.openai.azure.com/", MODEL_VERSION="gpt4o-deploy"),
}

PINNED = {'openai': {'api_type': 'openai',
            'base_url': None,
            'azure_endpoint': None,
            'api_version': None,
            'is_local': False,
            'endpoint_label': 'https://api.openai.com/v1',
            'endpoint_identity': 'https://api.openai.com:443/v1',
            'budget_folder': 'budget-7bc96a0e30a63c0d',
            'asks_for_identity': False,
            'redactions': [('736B2D746573742D303132333435363738396162636465666768696A', '[REDACTED]'),
                           ('736b2d746573742d303132333435363738396162636465666768696a', '[REDACTED]'),
                           ('c2stdGVzdC0wMTIzNDU2Nzg5YWJjZGVmZ2hpag', '[REDACTED]'),
                           ('sk-test-0123456789abcdefghij', '[REDACTED]'),
                           ('sk-test-0123456789abcdefghij', '[REDACTED]')],
            'cache_key': 'a21473f213c11aa37a3a508093fe7ea16cba6096602910c60e50e07730fdfb08'},
 'compatible': {'api_type': 'openai',
                'base_url': 'https://user:pw12345678@vllm.example.org:8443/v1/chat/completions?api-key=abcdef1234567890',
                'azure_endpoint': None,
                'api_version': None,
                'is_local': False,
                'endpoint_label': 'https://vllm.example.org:8443/v1/chat/completions',
                'endpoint_identity': 'https://vllm.example.org:8443/v1/chat/completions',
                'budget_folder': 'budget-9437f875e7aeef27',
                'asks_for_identity': True,
                'redactions': [('61626364656631323334353637383930', '[REDACTED]'),
                               ('64584E6C636A7077647A45794D7A51314E6A6334', '[REDACTED]'),
                               ('64584e6c636a7077647a45794d7a51314e6a6334', '[REDACTED]'),
                               ('70773132333435363738', '[REDACTED]'),
                               ('757365723A70773132333435363738', '[REDACTED]'),
                               ('757365723a70773132333435363738', '[REDACTED]'),
                               ('Basic dXNlcjpwdzEyMzQ1Njc4', 'Basic [REDACTED]'),
                               ('YWJjZGVmMTIzNDU2Nzg5MA', '[REDACTED]'),
                               ('abcdef1234567890', '[REDACTED]'),
                               ('abcdef1234567890', '[REDACTED]'),
                               ('api-key=abcdef1234567890', 'api-key=[REDACTED]'),
                               ('cHcxMjM0NTY3OA', '[REDACTED]'),
                               ('dXNlcjpwdzEyMzQ1Njc4', '[REDACTED]'),
                               ('pw12345678', '[REDACTED]'),
                               ('pw12345678', '[REDACTED]'),
                               ('user%3Apw12345678', '[REDACTED]'),
                               ('user:pw12345678', '[REDACTED]'),
                               ('user:pw12345678@', '')],
                'cache_key': 'ada2c1aa8b991b877fe1484e7d5e78089ca693228f910c3faa7b9cca76ce1692'},
 'local': {'api_type': 'openai',
           'base_url': 'http://localhost:8080/v1',
           'azure_endpoint': None,
           'api_version': None,
           'is_local': True,
           'endpoint_label': 'http://localhost:8080/v1',
           'endpoint_identity': 'http://127.0.0.1:8080/v1',
           'budget_folder': 'budget-478b35dfc075fd31',
           'asks_for_identity': True,
           'redactions': [],
           'cache_key': 'db7d7af089b839d232fd426a3d67c2e2ca62294d64228acb48bfb575dc5e5cd1'},
 'azure': {'api_type': 'azure',
           'base_url': None,
           'azure_endpoint': 'https://name.openai.azure.com/',
           'api_version': '2024-10-21',
           'is_local': False,
           'endpoint_label': 'azure:https://name.openai.azure.com/',
           'endpoint_identity': 'azure:https://name.openai.azure.com:443',
           'budget_folder': 'budget-efd0f6c2047bde30',
           'asks_for_identity': False,
           'redactions': [('0123456789abcdef0123456789abcdef', '[REDACTED]'),
                          ('0123456789abcdef0123456789abcdef', '[REDACTED]'),
                          ('3031323334353637383961626364656630313233343536373839616263646566', '[REDACTED]'),
                          ('MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY', '[REDACTED]')],
           'cache_key': '6544fe0627df2dda1ad6bc249cab2232a691c3e38a6202277338646d5581f86a'}}


@pytest.mark.parametrize("name", sorted(CASES))
def test_endpoint_budget_folder_redactions_and_cache_key_are_unchanged(name: str) -> None:
    config = JudgeConfig.from_env(dict(CASES[name], CAPJUDGE_CACHE="/pins/cache.sqlite"))
    body = {"model": config.model, "messages": [{"role": "user", "content": "hi"}]}
    seen = dict(api_type=config.api_type, base_url=config.base_url, azure_endpoint=config.azure_endpoint,
                api_version=config.api_version, is_local=config.is_local, endpoint_label=config.endpoint_label,
                endpoint_identity=config.endpoint_identity, budget_folder=judge_budget_folder(config).name,
                asks_for_identity=asks_for_identity(config), redactions=sorted(config_redactions(config)),
                cache_key=request_key(body, "v1", 0, None, config.endpoint_identity))
    assert seen == PINNED[name]
