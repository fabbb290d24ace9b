"""Judging inside lmms-eval at the client's concurrency, whatever `--process_docs_parallel` says.

Real lmms-eval runs of the demo task against the test server with 300 ms latency: with lmms-eval's
post-processing reduced to ONE thread, the judge still sees the client's bound of requests in flight, the
per-item values equal those of a run judged item by item (the client's bound set to 1), the judging phase has
its own progress bar, and `--predict_only` judges nothing.
"""

from __future__ import annotations

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import judge_server, launch_lmms_eval, run_lmms_eval

pytestmark = pytest.mark.slow

CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_fair.jsonl"
TASK = "gveval_demo"
N_ITEMS = 10


def _run(tmp_path, judge, *, concurrency: int, extra_args=("--process_docs_parallel", "1")):
    return run_lmms_eval(
        model="captions_file", model_args=f"path={CAPTIONS},model_name=fair", tasks=TASK,
        output_path=tmp_path / "out", judge_base_url=judge.base_url, cache_path=tmp_path / "cache.sqlite",
        env={"CAPJUDGE_MAX_CONCURRENCY": str(concurrency)}, extra_args=list(extra_args),
    )


def _per_item(run):
    keys = ("gveval_mean", "gveval_accuracy", "gveval_completeness", "gveval_conciseness", "gveval_relevance",
            "gveval_failed")
    return {sample["judged"]["item_id"]: ({key: sample[key] for key in keys}, sample["judged"]["judgment"]["raw_reply"])
            for sample in run.samples(TASK)}


def test_one_postprocessing_thread_still_judges_at_the_clients_bound(tmp_path):
    # 2 s per reply: the 8 requests overlap even when building each (a frame strip) is slow on a loaded
    # machine (at 0.3 s, a parallel test run saw only 6 in flight: the first replies came back before the
    # eighth request was built).
    with judge_server(latency=2.0) as judge:
        wide = _run(tmp_path / "wide", judge, concurrency=8)
        wide_in_flight, wide_requests = judge.max_in_flight, len(judge.log)
        judge.reset()
        judge.latency = 0.3
        narrow = _run(tmp_path / "narrow", judge, concurrency=1)
        narrow_in_flight = judge.max_in_flight
    assert wide_requests == N_ITEMS
    assert wide_in_flight == 8  # 10 items, 8 in flight at once, although lmms-eval ran one thread
    assert narrow_in_flight == 1
    # The same judgments either way: same requests, same replies, same parsed values.
    assert _per_item(wide) == _per_item(narrow)
    assert "capjudge: judging gveval_demo" in wide.outcome.stderr


def test_predict_only_judges_nothing(tmp_path):
    with judge_server() as judge:
        run = run_lmms_eval(
            model="captions_file", model_args=f"path={CAPTIONS},model_name=fair", tasks=TASK,
            output_path=tmp_path / "out", judge_base_url=judge.base_url, cache_path=tmp_path / "cache.sqlite",
            extra_args=["--predict_only"],
        )
        # Not even the pre-flight probe: a --predict_only run may be prepared where no judge is reachable.
        assert judge.log == [] and judge.preflights == []
    assert len(run.samples(TASK)) == N_ITEMS
    assert "capjudge: judging" not in run.outcome.stderr


def test_captions_are_judged_as_process_results_sees_them_reasoning_stripped(tmp_path):
    # lmms-eval strips <think> blocks and surrounding blanks just before process_results; the judging stage
    # must judge that same text, or each item would be asked twice (once per spelling).
    import json

    rows = [json.loads(line) for line in CAPTIONS.read_text(encoding="utf-8").splitlines() if line.strip()]
    thinking = tmp_path / "thinking.jsonl"
    thinking.write_text("".join(json.dumps({**row, "caption": f"<think>plan the caption</think>  {row['caption']} "}) + "\n"
                                for row in rows), encoding="utf-8")
    with judge_server() as judge:
        run = run_lmms_eval(
            model="captions_file", model_args=f"path={thinking},model_name=thinking", tasks=TASK,
            output_path=tmp_path / "out", judge_base_url=judge.base_url, cache_path=tmp_path / "cache.sqlite",
        )
        prompts = [entry.prompt_text for entry in judge.log]
    assert len(prompts) == N_ITEMS
    assert not any("<think>" in prompt for prompt in prompts)
    judged = [sample["judged"]["judgment"]["caption"] for sample in run.samples(TASK)]
    assert len(judged) == N_ITEMS and set(judged) <= {row["caption"] for row in rows}  # the file has both tasks


def test_a_run_that_ends_over_the_failure_limit_keeps_every_reply_it_got(tmp_path):
    # Such a run leaves through os._exit (the only way to set lmms-eval's exit status), which skips atexit:
    # every reply must be on disk by then, so the rerun asks the judge for nothing.
    from tests.support.openai_server import Reply

    from capjudge.judges.client.cache import ReplyCache

    never_parses = lambda body: Reply("I would rather not score this caption.")  # noqa: E731 - the whole responder
    with judge_server(responder=never_parses) as judge:
        first = launch_lmms_eval(
            model="captions_file", model_args=f"path={CAPTIONS},model_name=fair", tasks=TASK,
            output_path=tmp_path / "out", judge_base_url=judge.base_url, cache_path=tmp_path / "cache.sqlite",
            env={"CAPJUDGE_MAX_FAILURE_RATE": "0.5"},
        ).require_results()
        asked = len(judge.log)
        assert first.outcome.returncode == 3, first.outcome.stderr[-2000:]
        assert asked == N_ITEMS * 3  # G-VEval re-asks a reply that does not parse, up to 3 replies per item
        assert len(ReplyCache(tmp_path / "cache.sqlite")) == asked
        judge.reset(responder=never_parses)
        second = launch_lmms_eval(
            model="captions_file", model_args=f"path={CAPTIONS},model_name=fair", tasks=TASK,
            output_path=tmp_path / "again", judge_base_url=judge.base_url, cache_path=tmp_path / "cache.sqlite",
            env={"CAPJUDGE_MAX_FAILURE_RATE": "0.5"},
        ).require_results()
        assert second.outcome.returncode == 3
        assert judge.log == []
