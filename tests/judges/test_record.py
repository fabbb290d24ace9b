"""The typed per-item record (`capjudge.judges.record`, #30 item 1), read and written without a harness run.

The two records below are verbatim `judged` values of a run made with the capjudge before records had a
version (commit f999aa6: `capjudge judge` on the demo's good captions, k = 3 replies per item, against the
test server's known-noise responder of tests/metrics/statistics/test_reliability_both_judges.py). They are what every run file
written before this change holds, so they must keep reading: as version 1, every field as logged, AnyCap's
empty `spread` included (the bug of that version: it read a `scores` mapping only G-VEval replies have).
The end-to-end checks (reliability, agreement, leaderboard, report on fresh and old-shaped k = 5 runs of both
judges) are in tests/metrics/statistics/test_reliability_both_judges.py.
"""

from __future__ import annotations

import copy
import re
import statistics
from dataclasses import replace

import pytest

from capjudge.judges.known_judges import SHIPPED_JUDGES
from capjudge.judges.record import (
    RECORD_VERSION,
    JudgedRecord,
    JudgingProcess,
    RecordError,
    TokenUsage,
    reply_spread,
)
from capjudge.metrics.item_report.views import view_judgment
from capjudge.tasks.harness.anycap_task import AnyCapSettings
from capjudge.tasks.harness.gveval_task import GVEvalSettings
from tests.support.paths import REPO_ROOT

OLD_ANYCAP = (
    {'item_id': 'a01',
     'judge': {'name': 'anycap',
               'model': 'gpt-4o-2024-08-06',
               'endpoint': 'http://127.0.0.1:33599/v1',
               'judge_version': 'anycap-style-video/1',
               'settings': {'tolerance': 10,
                            'instruction_rule': False,
                            'max_tries': 5,
                            'sampling': {'temperature': 0.7, 'max_tokens': 4096},
                            'constrained_output': False,
                            'samples': 3}},
     'judgment': {'caption': 'A red ball rolls from the left edge of the frame to the right edge over a grey '
                             'floor.',
                  'video': '/tmp/old_capjudge/tasks/demo/red_ball.mp4',
                  'caption_type': 'brief',
                  'judge_score': 3.0,
                  'final_score': 3.0,
                  'capped_by': None,
                  'output_words': 19,
                  'reference_words': 18,
                  'length_rule_applied': True,
                  'within_tolerance': True,
                  'tolerance_percent': 10,
                  'restriction': None,
                  'restriction_satisfied': None,
                  'flags': [],
                  'reason': None,
                  'failure': None,
                  'failure_detail': '',
                  'raw_reply': '{"score": 4, "reason": "known noise"}',
                  'cache_hit': False,
                  'requests': 3,
                  'usage': {'prompt_tokens': 1833, 'completion_tokens': 60},
                  'process': {'rank': 0, 'pid': 28556},
                  'samples': [{'caption_type': 'brief',
                               'judge_score': 4,
                               'final_score': 4,
                               'capped_by': None,
                               'output_words': 19,
                               'reference_words': 18,
                               'length_rule_applied': True,
                               'within_tolerance': True,
                               'tolerance_percent': 10,
                               'restriction': None,
                               'restriction_satisfied': None,
                               'flags': [],
                               'reason': 'known noise',
                               'failure': None,
                               'failure_detail': '',
                               'raw_reply': '{"score": 4, "reason": "known noise"}',
                               'cache_hit': False,
                               'requests': 1},
                              {'caption_type': 'brief',
                               'judge_score': 2,
                               'final_score': 2,
                               'capped_by': None,
                               'output_words': 19,
                               'reference_words': 18,
                               'length_rule_applied': True,
                               'within_tolerance': True,
                               'tolerance_percent': 10,
                               'restriction': None,
                               'restriction_satisfied': None,
                               'flags': [],
                               'reason': 'known noise',
                               'failure': None,
                               'failure_detail': '',
                               'raw_reply': '{"score": 2, "reason": "known noise"}',
                               'cache_hit': False,
                               'requests': 1},
                              {'caption_type': 'brief',
                               'judge_score': 3,
                               'final_score': 3,
                               'capped_by': None,
                               'output_words': 19,
                               'reference_words': 18,
                               'length_rule_applied': True,
                               'within_tolerance': True,
                               'tolerance_percent': 10,
                               'restriction': None,
                               'restriction_satisfied': None,
                               'flags': [],
                               'reason': 'known noise',
                               'failure': None,
                               'failure_detail': '',
                               'raw_reply': '{"score": 3, "reason": "known noise"}',
                               'cache_hit': False,
                               'requests': 1}],
                  'spread': {}}}
)

OLD_GVEVAL = (
    {'item_id': 'g01',
     'judge': {'name': 'gveval',
               'model': 'gpt-4o-2024-05-13',
               'endpoint': 'http://127.0.0.1:33599/v1',
               'judge_version': 'gveval-accr-video/1',
               'settings': {'scoring': 'text',
                            'mode': 'frames+references',
                            'max_tries': 3,
                            'sampling': {'temperature': 1, 'top_p': 1, 'logprobs': True, 'top_logprobs': 5},
                            'constrained_output': False,
                            'samples': 3}},
     'judgment': {'caption': 'A red ball rolls from the left side of the frame to the right along a grey '
                             'floor.',
                  'video': '/tmp/old_capjudge/tasks/demo/red_ball.mp4',
                  'scores': {'accuracy': 27.333333333333332,
                             'completeness': 30.0,
                             'conciseness': 34.0,
                             'relevance': 32.333333333333336,
                             'mean': 30.916666666666668},
                  'scoring': 'text',
                  'fallback_reason': None,
                  'failure': None,
                  'failure_detail': None,
                  'raw_reply': 'Judged. The Accuracy score is α24α. The Completeness score is β28β. The '
                               'Conciseness score is ψ32ψ. The Relevance score is δ45δ.',
                  'cache_hit': False,
                  'requests': 3,
                  'usage': {'prompt_tokens': 1602, 'completion_tokens': 162},
                  'process': {'rank': 0, 'pid': 29065},
                  'samples': [{'scores': {'accuracy': 24.0,
                                          'completeness': 28.0,
                                          'conciseness': 32.0,
                                          'relevance': 45.0,
                                          'mean': 32.25},
                               'scoring': 'text',
                               'fallback_reason': None,
                               'failure': None,
                               'failure_detail': None,
                               'raw_reply': 'Judged. The Accuracy score is α24α. The Completeness score is '
                                            'β28β. The Conciseness score is ψ32ψ. The Relevance score is δ45δ.',
                               'cache_hit': False,
                               'requests': 1},
                              {'scores': {'accuracy': 41.0,
                                          'completeness': 36.0,
                                          'conciseness': 34.0,
                                          'relevance': 30.0,
                                          'mean': 35.25},
                               'scoring': 'text',
                               'fallback_reason': None,
                               'failure': None,
                               'failure_detail': None,
                               'raw_reply': 'Judged. The Accuracy score is α41α. The Completeness score is '
                                            'β36β. The Conciseness score is ψ34ψ. The Relevance score is δ30δ.',
                               'cache_hit': False,
                               'requests': 1},
                              {'scores': {'accuracy': 17.0,
                                          'completeness': 26.0,
                                          'conciseness': 36.0,
                                          'relevance': 22.0,
                                          'mean': 25.25},
                               'scoring': 'text',
                               'fallback_reason': None,
                               'failure': None,
                               'failure_detail': None,
                               'raw_reply': 'Judged. The Accuracy score is α17α. The Completeness score is '
                                            'β26β. The Conciseness score is ψ36ψ. The Relevance score is δ22δ.',
                               'cache_hit': False,
                               'requests': 1}],
                  'spread': {'accuracy': 12.342339054382412,
                             'completeness': 5.291502622129181,
                             'conciseness': 2.0,
                             'relevance': 11.67618659209133,
                             'mean': 5.131601439446884}}}
)


def test_an_unversioned_record_reads_as_version_1_with_every_field_as_logged():
    record = JudgedRecord.from_logged(OLD_ANYCAP)
    assert (record.version, record.item_id, record.judge_name) == (1, "a01", "anycap")
    assert record.judge.model == "gpt-4o-2024-08-06" and record.judge.settings["samples"] == 3
    judgment = record.judgment
    assert judgment.judged and judgment.failure_detail == "" and judgment.cache_hit is False and judgment.requests == 3
    assert judgment.usage == TokenUsage(1833, 60) and judgment.process == JudgingProcess(0, 28556)
    assert judgment.fields["final_score"] == 3.0 and judgment.fields["caption_type"] == "brief"
    assert [reply.value("final_score") for reply in record.replies()] == [4, 2, 3]
    assert all(reply.requests == 1 and reply.raw_reply.startswith("{") for reply in record.replies())
    assert judgment.spread == {}  # what version 1 logged for AnyCap

    gveval = JudgedRecord.from_logged(OLD_GVEVAL)
    assert (gveval.version, gveval.item_id, gveval.judge_name) == (1, "g01", "gveval")
    assert [reply.value("scores.accuracy") for reply in gveval.replies()] == [24, 41, 17]
    assert gveval.judgment.spread == OLD_GVEVAL["judgment"]["spread"]


def test_a_record_is_written_in_the_old_shape_plus_its_version():
    for old in (OLD_ANYCAP, OLD_GVEVAL):
        written = JudgedRecord.from_logged(old).to_json()
        assert written["record_version"] == RECORD_VERSION == 2
        assert {key: value for key, value in written.items() if key != "record_version"} == old
        # Key by key in the same order, so a run's records differ from before only by the version.
        assert list(written["judgment"]) == list(old["judgment"])
        assert [list(s) for s in written["judgment"]["samples"]] == [list(s) for s in old["judgment"]["samples"]]
        assert JudgedRecord.from_logged(written) == replace(JudgedRecord.from_logged(old), version=2)


def test_the_spread_of_a_version_1_anycap_record_is_measured_from_its_replies():
    """Version 1 logged no AnyCap spread; the item report computes it from the replies, with the judge's
    declared main score (AnyCap's final score), and the G-VEval one is the mean's, as logged."""
    anycap = JudgedRecord.from_logged(OLD_ANYCAP).judgment
    assert view_judgment(SHIPPED_JUDGES["anycap"], anycap).spread == pytest.approx(statistics.stdev([4, 2, 3]))
    assert reply_spread(anycap.samples, SHIPPED_JUDGES["anycap"].reply_fields) == pytest.approx(
        {"final_score": statistics.stdev([4, 2, 3]), "judge_score": statistics.stdev([4, 2, 3])})
    gveval = JudgedRecord.from_logged(OLD_GVEVAL).judgment
    assert view_judgment(SHIPPED_JUDGES["gveval"], gveval).spread == pytest.approx(OLD_GVEVAL["judgment"]["spread"]["mean"])
    # The writer's spread for G-VEval is what version 1 logged, key by key.
    assert reply_spread(gveval.samples, SHIPPED_JUDGES["gveval"].reply_fields) == pytest.approx(OLD_GVEVAL["judgment"]["spread"])


def test_the_older_layout_at_the_top_of_the_line_and_lines_without_a_record():
    line = {"doc_id": 4, "item_id": 7, "judge": "gpt-4o-2024-05-13", "gveval_mean": 50.0}
    record = JudgedRecord.in_line(line)
    assert (record.version, record.item_id, record.judge.model, record.judge.name, record.judgment) == (
        1, "7", "gpt-4o-2024-05-13", None, None)
    assert record.replies() == []
    assert JudgedRecord.in_line({"doc_id": 4, "gveval_mean": 50.0}) is None
    # A judge identity without a name (a stand-in task's) is read too.
    assert JudgedRecord.in_line({"judge": {"model": "m", "judge_version": "v"}}).judge.judge_version == "v"


def _spoiled(change):
    record = copy.deepcopy(OLD_ANYCAP)
    change(record)
    return record


@pytest.mark.parametrize("record, named", [
    ([OLD_ANYCAP], "the `judged` record is a list"),
    (_spoiled(lambda r: r.update(record_version=3)), "`record_version` is 3: written by a newer capjudge"),
    (_spoiled(lambda r: r.update(record_version="2")), "`record_version` is '2'"),
    (_spoiled(lambda r: r.update(record_version=True)), "`record_version` is True"),
    (_spoiled(lambda r: r.update(item_id=["a01"])), "`item_id` is a list"),
    (_spoiled(lambda r: r.update(judge=5)), "`judge` is a int"),
    (_spoiled(lambda r: r["judge"].update(name=5)), "`judge.name` is a int"),
    (_spoiled(lambda r: r.update(judgment="judged")), "`judgment` is a str"),
    (_spoiled(lambda r: r["judgment"].update(samples={"0": {}})), "`judgment.samples` is a dict"),
    (_spoiled(lambda r: r["judgment"]["samples"].__setitem__(1, 4)), "`judgment.samples[1]` is a int"),
    (_spoiled(lambda r: r["judgment"]["samples"][2].update(failure=0)), "`judgment.samples[2].failure` is a int"),
    (_spoiled(lambda r: r["judgment"].update(requests=-1)), "`judgment.requests` is -1, a negative count"),
    (_spoiled(lambda r: r["judgment"].update(cache_hit="no")), "`judgment.cache_hit` is a str"),
    (_spoiled(lambda r: r["judgment"].update(requests=True)), "`judgment.requests` is a bool"),
    (_spoiled(lambda r: r["judgment"]["usage"].update(prompt_tokens="many")), "`judgment.usage.prompt_tokens` is a str"),
    (_spoiled(lambda r: r["judgment"].update(spread={"final_score": "wide"})), "`judgment.spread` is not an object of numbers"),
])
def test_a_malformed_record_is_a_record_error_naming_the_field(record, named):
    with pytest.raises(RecordError) as raised:
        JudgedRecord.from_logged(record)
    assert named in str(raised.value)
    assert "\n" not in str(raised.value)


def _yaml_metrics(path) -> set[str]:
    return set(re.findall(r"^\s*- metric: (\S+)", path.read_text(encoding="utf-8"), flags=re.M))


def test_each_judge_declares_which_reply_field_backs_which_of_its_tasks_metrics():
    """The declarations are keyed by the names the tasks log, name metrics the task YAMLs list, and name
    fields the judges' replies carry (in the logged records above)."""
    assert set(SHIPPED_JUDGES) == {GVEvalSettings.judge_name, AnyCapSettings.judge_name}
    yamls = {"gveval": REPO_ROOT / "tasks/gveval/gveval.yaml", "anycap": REPO_ROOT / "tasks/anycap_style/anycap_style.yaml"}
    for judge, old in (("gveval", OLD_GVEVAL), ("anycap", OLD_ANYCAP)):
        fields = SHIPPED_JUDGES[judge].reply_fields
        assert set(fields.metrics) <= _yaml_metrics(yamls[judge]), judge
        assert set(fields.metrics.values()) | set(fields.scores) | {fields.main} <= set(fields.values)
        for reply in JudgedRecord.from_logged(old).replies():
            assert all(reply.value(field) is not None for field in fields.values.values()), (judge, reply)
