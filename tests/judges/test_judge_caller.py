"""The judge-call interface (issue 48): what a judge asks through is the declared `JudgeCaller` protocol, and
every stand-in for the network client (per-item observer, Batch recorder, estimate's counter) implements it with
the same signature, so a judge never knows which it was handed."""

from __future__ import annotations

import inspect

from capjudge.judges.client.batch import BatchRecorder
from capjudge.judges.client.observed import ObservedClient
from capjudge.judges.types import ChatRequest, JudgeCaller
from capjudge.tasks.runs.judging.estimate import EstimatingClient


def _keywords(function) -> set[str]:
    return {name for name, parameter in inspect.signature(function).parameters.items()
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY}


def test_every_judge_caller_implements_the_protocol(server, make_client):
    client = make_client(server)
    callers = [client, ObservedClient(client), BatchRecorder(client, None, "item-1", {}), EstimatingClient("m")]
    assert all(isinstance(caller, JudgeCaller) for caller in callers)
    declared = _keywords(JudgeCaller.judge)
    assert declared == {"judge_version", "max_tries", "first_sample_index"}
    # The two that spell the signature out spell it as declared; the others pass every keyword on (**kwargs).
    assert _keywords(type(client).judge) == declared == _keywords(BatchRecorder.judge)
    outcome = ObservedClient(client).judge(ChatRequest(parts=("rate this",)), lambda reply: reply.content,
                                           judge_version="caller-1")
    assert outcome.ok and len(server.completions) == 1
