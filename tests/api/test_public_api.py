"""capjudge's public Python API (`capjudge.api`, README "Python API") used as a notebook uses it: the test imports
`capjudge.api` names only (the test server, the test video maker and the run helpers aside, which stand in for a
judge, a clip and an lmms-eval run).

Judging goes to the OpenAI-compatible test server with real encoded videos; each shipped judge's scores are the
ones the server's scripted replies imply, a malformed reply is the judge's typed failure (never a 0), and a second
call is answered from the reply cache (no request reaches the server). Runs and the leaderboard are read from one
real lmms-eval run, and the board is the one `capjudge leaderboard` writes, byte for byte. Correlations are
scipy's own; sensitivity is `capjudge sensitivity`'s run on two demo items. Input the API cannot judge is one
typed exception naming the item and the problem.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

import capjudge.api as api
from capjudge.api import (
    AnyCapResult,
    BootstrapSettings,
    ConfigError,
    GVEvalResult,
    ItemError,
    JudgeConfig,
    JudgeInputError,
    LeaderboardSettings,
    UnknownJudgeError,
    build_leaderboard,
    correlate,
    judge_caption,
    judge_captions,
    judge_names,
    leaderboard_markdown,
    load_runs,
    run_sensitivity,
    sensitivity_table,
    write_leaderboard,
)
from tests.support.paths import REPO_ROOT, SUPPORT_DIR
from tests.support.harness_runs import run_capjudge
from tests.support.harness_runs import TEST_API_KEY, TEST_JUDGE_MODEL, judge_server, run_lmms_eval
from tests.support.openai_server import Reply, prompt_text, with_logprobs
from tests.support.videos import make_video

# The public API, spelled out: a name added, removed or renamed is a deliberate edit here (README "Python API").
PUBLIC_NAMES = [
    "judge_caption", "judge_captions", "judge_names", "JudgeConfig", "ItemJudgment", "JudgeResult", "GVEvalResult",
    "AnyCapResult", "JudgeInputError", "UnknownJudgeError", "ItemError", "ConfigError",
    "load_runs", "Run", "TaskRun", "RunFileError", "build_leaderboard", "LeaderboardSettings", "Leaderboard",
    "write_leaderboard", "LeaderboardFiles", "leaderboard_markdown",
    "correlate", "BootstrapSettings", "CorrelationResult", "Coefficient",
    "run_sensitivity", "SensitivityReport", "sensitivity_table",
]
DEMO = REPO_ROOT / "tasks" / "demo"
MALFORMED = "MALFORMED"  # a caption holding it gets a reply no rubric parser reads

# What the scripted judge says of each caption: G-VEval's four scores, AnyCap's grade.
GVEVAL_SCORES = {"A red ball rolls to the right.": (81, 72, 90, 65), "A blue square grows.": (40, 35, 88, 51),
                 "Something happens.": (12, 9, 70, 20)}
ANYCAP_GRADES = {"A red ball rolls slowly to the right across the floor.": 3, "A blue square grows.": 1,
                 "Something happens on the screen.": 0}


def _gveval_reply(scores) -> Reply:
    accuracy, completeness, conciseness, relevance = scores
    return with_logprobs(f"Reasons first. The Accuracy score is α{accuracy}α.\nThe Completeness score is "
                         f"β{completeness}β.\nThe Conciseness score is ψ{conciseness}ψ.\n"
                         f"The Relevance score is δ{relevance}δ.")


def _gveval_caption(text: str) -> str:
    return text.split("Generated Caption:", 1)[1].split("You should first give", 1)[0].strip()


def scripted(body) -> Reply:
    text = prompt_text(body)
    if "Generated Caption:" in text:
        caption = _gveval_caption(text)
        return Reply("I would rather not score this.") if MALFORMED in caption else _gveval_reply(GVEVAL_SCORES[caption])
    output = text.split("Model Output:", 1)[1].split("Reference:", 1)[0].strip()
    return Reply("no score here") if MALFORMED in output else Reply(json.dumps({"score": ANYCAP_GRADES[output],
                                                                                 "reason": "scripted"}))


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    folder = tmp_path_factory.mktemp("clips")
    return [str(make_video(folder / f"clip{i}.mp4", 24)) for i in range(3)]


def _items(judge: str, clips, captions) -> list[dict]:
    if judge == "gveval":
        return [{"id": f"g{i}", "video": clips[i], "caption": caption} for i, caption in enumerate(captions)]
    return [{"id": f"a{i}", "video": clips[i], "caption": caption, "caption_type": "narrative",
             "reference": "A shape moves on a plain background."} for i, caption in enumerate(captions)]


def _config(server, tmp_path, **changes) -> JudgeConfig:
    return JudgeConfig(**{"base_url": server.base_url, "api_key": TEST_API_KEY, "model": TEST_JUDGE_MODEL,
                          "cache_path": tmp_path / "cache.sqlite", "timeout": 10.0, "max_attempts": 2, **changes})


def _check_scores(judge: str, judged, caption: str) -> None:
    result = judged.result
    assert judged.ok and result.ok and judged.caption == caption
    if judge == "gveval":
        assert isinstance(result, GVEvalResult)
        expected = GVEVAL_SCORES[caption]
        assert (result.accuracy, result.completeness, result.conciseness, result.relevance) == expected
        assert result.mean == pytest.approx(sum(expected) / 4)
    else:
        assert isinstance(result, AnyCapResult)
        assert result.judge_score == result.final_score == ANYCAP_GRADES[caption]  # narrative: no length rule


def test_the_public_names_are_exactly_the_listed_ones():
    assert api.__all__ == PUBLIC_NAMES
    assert [name for name in PUBLIC_NAMES if not hasattr(api, name)] == []
    assert {"anycap", "gveval"} <= set(judge_names())


@pytest.mark.parametrize("judge", ["gveval", "anycap"])
def test_one_item_and_a_list_score_what_the_replies_say_and_a_rerun_asks_nothing(judge, server, clips, tmp_path):
    server.reset(scripted)
    captions = list(GVEVAL_SCORES if judge == "gveval" else ANYCAP_GRADES)
    items = _items(judge, clips, captions)
    config = _config(server, tmp_path)
    one = judge_caption(judge, items[0], config=config)
    _check_scores(judge, one, captions[0])
    assert (one.item_id, one.cache_hit, one.requests, len(server.log)) == (items[0]["id"], False, 1, 1)
    assert server.log[0].body["model"] == TEST_JUDGE_MODEL
    assert sum(p["type"] == "image_url" for p in server.log[0].body["messages"][0]["content"]) >= 1  # the clip's frames

    judged = judge_captions(judge, items, config=config)
    assert [j.item_id for j in judged] == [item["id"] for item in items]
    for judgment, caption in zip(judged, captions):
        _check_scores(judge, judgment, caption)
    assert [j.cache_hit for j in judged] == [True, False, False] and len(server.log) == 3

    again = judge_captions(judge, items, config=config)
    assert len(server.log) == 3, "the second call reached the server"
    assert all(j.cache_hit and j.requests == 0 for j in again)
    assert [j.result.scores() for j in again] == [j.result.scores() for j in judged]


@pytest.mark.parametrize("judge", ["gveval", "anycap"])
def test_a_malformed_reply_is_the_judges_typed_failure_never_a_score(judge, server, clips, tmp_path):
    server.reset(scripted)
    (item,) = _items(judge, clips, [f"{MALFORMED} caption"])
    judged = judge_caption(judge, item, config=_config(server, tmp_path), settings={"max_tries": 2})
    result = judged.result
    assert not judged.ok and not result.ok
    assert result.failure_kind == ("missing" if judge == "gveval" else "no_json")
    assert set(result.scores().values()) == {None}  # unjudged: no number at all, so never a 0 in a mean
    assert (judged.requests, len(server.log)) == (2, 2)  # asked again once, as max_tries says
    assert judge_caption(judge, item, config=_config(server, tmp_path), settings={"max_tries": 2}).result.failure_kind \
        == result.failure_kind and len(server.log) == 2


def test_the_configuration_and_the_settings_are_the_ones_used(server, clips, tmp_path):
    """max_concurrency bounds the requests in flight; settings reach the judge as a task's metadata does."""
    server.reset(scripted)
    server.latency = 0.05
    items = _items("gveval", clips, list(GVEVAL_SCORES))
    judge_captions("gveval", items, config=_config(server, tmp_path, max_concurrency=1))
    assert (len(server.log), server.max_in_flight) == (3, 1)

    server.reset(scripted)
    text_only = {**items[0], "video": None, "references": ["A red ball rolls to the right of the screen."]}
    judged = judge_caption("gveval", text_only, config=_config(server, tmp_path, cache_path=tmp_path / "two.sqlite"),
                           settings={"mode": "references", "scoring": "text"})
    _check_scores("gveval", judged, items[0]["caption"])
    content = server.log[0].body["messages"][0]["content"]
    assert [part["type"] for part in content] == ["text"]
    assert "A red ball rolls to the right of the screen." in content[0]["text"]
    with pytest.raises(ConfigError, match="mode"):
        judge_caption("gveval", items[0], config=_config(server, tmp_path), settings={"mode": "sideways"})


def test_a_judge_known_to_capjudge_by_its_task_class_is_judged_by_name(server, clips, tmp_path):
    """A third judge (tests/support/toy_judge, kept outside capjudge): once its task module is imported, its name judges."""
    spec = importlib.util.spec_from_file_location("toy_judge_utils", SUPPORT_DIR / "toy_judge" / "utils.py")
    toy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(toy)  # kept in `toy` while judging: a class is known while its module lives
    assert "toy" in judge_names()
    server.reset(lambda body: Reply("overall=7 fluency=6"))
    judged = judge_caption("toy", {"id": "t1", "video": clips[0], "caption": "A shape."},
                           config=_config(server, tmp_path))
    assert dict(judged.result.scores()) == {"overall": 7.0, "fluency": 6.0} and "TOY JUDGE" in server.log[0].prompt_text


# ---------------------------------------------------------------------------------------------------------
# Input the API cannot judge


def test_an_unknown_judge_is_named_with_the_known_ones(server, clips, tmp_path):
    items = _items("gveval", clips, list(GVEVAL_SCORES))
    for call in (lambda: judge_caption("gvevl", items[0], config=_config(server, tmp_path)),
                 lambda: judge_captions("gvevl", items, config=_config(server, tmp_path))):
        with pytest.raises(UnknownJudgeError) as raised:
            call()
        assert "'gvevl'" in str(raised.value) and "anycap" in str(raised.value) and "gveval" in str(raised.value)
    assert server.log == []


@pytest.mark.parametrize("caption", [42, None, b"bytes", ["a", "list"]])
def test_a_caption_that_is_not_text_is_an_item_error_before_any_request(caption, server, clips, tmp_path):
    items = _items("gveval", clips, list(GVEVAL_SCORES))
    items[1]["caption"] = caption
    with pytest.raises(ItemError) as raised:
        judge_captions("gveval", items, config=_config(server, tmp_path))
    assert (raised.value.item, server.log) == ("g1", [])
    assert str(raised.value).startswith("item g1: 'caption' is ") and "not text" in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("item, named, problem", [
    ({"id": "g9", "video": "x.mp4"}, "g9", "has no field 'caption'"),
    ({"video": "x.mp4", "caption": "A shape."}, "#0", "has no usable 'id'"),
    ({"id": True, "caption": "A shape."}, "#0", "has no usable 'id'"),
    ("a caption alone", "#0", "not a mapping"),
    ({"id": "g9", "caption": "A shape.", "video": 7}, "g9", "'video' is an int"),
])
def test_an_item_the_api_cannot_read_is_named_with_its_problem(item, named, problem, server, tmp_path):
    with pytest.raises(ItemError) as raised:
        judge_caption("gveval", item, config=_config(server, tmp_path))
    assert raised.value.item == named and problem in str(raised.value), str(raised.value)
    assert server.log == []


def test_a_field_the_judge_reads_missing_names_the_item_and_the_field_and_loses_no_judgment(server, clips, tmp_path):
    server.reset(scripted)
    good, lacking = _items("anycap", clips, list(ANYCAP_GRADES))[:2]
    del lacking["reference"]
    config = _config(server, tmp_path)
    with pytest.raises(ItemError) as raised:
        judge_caption("anycap", lacking, config=config)
    assert str(raised.value) == "item a1: has no field 'reference', which the anycap judge reads"
    assert server.log == []
    with pytest.raises(ItemError, match="item a1: has no field 'reference'"):
        judge_captions("anycap", [good, lacking], config=config)
    assert len(server.log) == 1  # the good item was judged, and its reply kept:
    assert judge_captions("anycap", [good], config=config)[0].cache_hit and len(server.log) == 1


def test_a_list_must_be_a_list_and_one_id_one_item(server, clips, tmp_path):
    items = _items("gveval", clips, list(GVEVAL_SCORES))
    with pytest.raises(JudgeInputError, match="takes a list of items.*for one item use judge_caption"):
        judge_captions("gveval", items[0], config=_config(server, tmp_path))
    with pytest.raises(ItemError, match="item g0: is given twice with different fields"):
        judge_captions("gveval", [items[0], {**items[0], "video": clips[1]}], config=_config(server, tmp_path))
    assert server.log == []


@pytest.mark.parametrize("judge, field, value, problem", [
    # Each failed inside the judge, naming neither the item nor the field (issue #60 item 6):
    ("gveval", "references", [1, 2], "'references' is a list ([1, 2]), not a list of texts"),  # an AttributeError
    # a text was judged as one reference caption per letter (list("A red ball."))
    ("gveval", "references", "A red ball.", "'references' is a str ('A red ball.'), not a list of texts"),
    ("gveval", "references", ["A red ball.", None], "'references' is a list (['A red ball.', None]), not a list of texts"),
    ("anycap", "reference", 7, "'reference' is an int (7), not text"),  # a TypeError
    ("anycap", "caption_type", ["brief"], "'caption_type' is a list (['brief']), not text"),
    ("anycap", "instruction", 3.5, "'instruction' is a float (3.5), not text"),
])
def test_a_field_the_judges_read_of_another_type_is_an_item_error_before_any_request(judge, field, value, problem,
                                                                                      server, clips, tmp_path):
    items = _items(judge, clips, list(GVEVAL_SCORES if judge == "gveval" else ANYCAP_GRADES))
    items[1][field] = value
    for call in (lambda: judge_caption(judge, items[1], config=_config(server, tmp_path)),
                 lambda: judge_captions(judge, items, config=_config(server, tmp_path))):
        with pytest.raises(ItemError) as raised:
            call()
        assert (raised.value.item, str(raised.value)) == (items[1]["id"], f"item {items[1]['id']}: {problem}")
    assert server.log == []


def test_a_field_given_as_none_is_absent_and_named_when_the_judge_reads_it(server, clips, tmp_path):
    (item,) = _items("anycap", clips, list(ANYCAP_GRADES)[:1])
    with pytest.raises(ItemError) as raised:  # before, None reached the judge: a TypeError
        judge_caption("anycap", {**item, "reference": None}, config=_config(server, tmp_path))
    assert str(raised.value) == "item a0: has no field 'reference', which the anycap judge reads"
    assert server.log == []


def test_a_whole_number_id_too_long_to_write_is_an_item_error_naming_its_position(server, clips, tmp_path):
    items = _items("gveval", clips, list(GVEVAL_SCORES))
    items[2]["id"] = 10**5000  # Python refuses to write it as text: a ValueError naming nothing of the item
    with pytest.raises(ItemError) as raised:
        judge_captions("gveval", items, config=_config(server, tmp_path))
    assert raised.value.item == "#2" and "has no usable 'id'" in str(raised.value)
    assert "at most 20 digits; give a longer one as text" in str(raised.value) and len(str(raised.value)) < 200
    items[2]["id"] = 10**19  # a 64-bit id is kept, as its text
    with pytest.raises(ItemError, match="item 10000000000000000000: 'caption' is an int"):
        judge_captions("gveval", [*items[:2], {**items[2], "caption": 10**5000}], config=_config(server, tmp_path))
    assert server.log == []


@pytest.mark.parametrize("judge, settings, named, suggested, known", [
    ("gveval", {"mdoe": "references"}, "'mdoe'", "'mode'", "judge_samples, max_caption_chars, max_tries, mode, "
                                                          "references, scoring"),
    ("anycap", {"max_tries": 2, "tolerence": 10}, "'tolerence'", "'tolerance'",
     "instruction_rule, judge_samples, max_caption_chars, max_tries, tolerance"),
    ("gveval", {"dataset": "msvd_eval"}, "'dataset'", None, "judge_samples, max_caption_chars, max_tries, mode, "
                                                              "references, scoring"),
])
def test_a_setting_the_judge_does_not_know_is_refused_with_the_ones_it_knows(judge, settings, named, suggested, known,
                                                                              server, clips, tmp_path):
    """Before, {"mdoe": "references"} was ignored and the item judged in frames mode, as if it had been heard."""
    items = _items(judge, clips, list(GVEVAL_SCORES if judge == "gveval" else ANYCAP_GRADES))
    for call in (lambda: judge_caption(judge, items[0], config=_config(server, tmp_path), settings=settings),
                 lambda: judge_captions(judge, items, config=_config(server, tmp_path), settings=settings)):
        with pytest.raises(JudgeInputError) as raised:
            call()
        message = str(raised.value)
        assert message.startswith(f"settings: {named} is no setting of the {judge} judge"), message
        assert (f"(did you mean {suggested}?)" in message) == (suggested is not None), message
        assert message.endswith(f"; its settings: {known}") and not isinstance(raised.value, ItemError)
    assert server.log == []


def test_a_setting_the_environment_overrides_is_still_a_known_one(server, clips, tmp_path, monkeypatch):
    """The judge's settings are the ones it reads with no environment: CAPJUDGE_GVEVAL_MODE, which wins over
    `mode` as in a run, does not make `mode` unknown."""
    server.reset(scripted)
    monkeypatch.setenv("CAPJUDGE_GVEVAL_MODE", "frames")
    (item,) = _items("gveval", clips, list(GVEVAL_SCORES)[:1])
    judged = judge_caption("gveval", item, config=_config(server, tmp_path), settings={"mode": "references"})
    _check_scores("gveval", judged, item["caption"])
    assert len(server.log) == 1 and any(p["type"] == "image_url" for p in server.log[0].body["messages"][0]["content"])


# ---------------------------------------------------------------------------------------------------------
# Analysis: runs, leaderboard, correlation


def test_importing_the_api_reads_no_judge_setting_and_loads_no_lmms_eval():
    probe = """
import json, os, sys
read = []
class Spy(type(os.environ)):
    def __getitem__(self, key):
        read.append(key)
        return super().__getitem__(key)
os.environ.__class__ = Spy
import capjudge.api
judge_settings = ("CAPJUDGE_", "OPENAI_", "AZURE_", "API_TYPE", "MODEL_VERSION")
ours = lambda: sorted({key for key in read if key.startswith(judge_settings)})
at_import, lmms_eval = ours(), "lmms_eval" in sys.modules
try:  # the spy sees a read, so this check can fail: the same environment is refused once a config is read
    capjudge.api.JudgeConfig.from_env(require_key=False)
    refused = ""
except capjudge.api.ConfigError as error:
    refused = str(error)
print(json.dumps([at_import, lmms_eval, ours(), refused]))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "API_TYPE": "nonsense", "CAPJUDGE_MAX_CONCURRENCY": "many"})
    assert done.returncode == 0, done.stderr[-2000:]
    at_import, lmms_eval, after_call, refused = json.loads(done.stdout.strip().splitlines()[-1])
    assert (at_import, lmms_eval) == ([], False)
    assert "API_TYPE" in after_call and "API_TYPE must be" in refused


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    """One small real lmms-eval run: the demo G-VEval task, two items, the packaged good captions."""
    root = tmp_path_factory.mktemp("api_run")
    with judge_server() as judge:
        run = run_lmms_eval(model="captions_file", model_args=f"path={DEMO / 'captions_good.jsonl'},model_name=good",
                            tasks="gveval_demo", limit=2, output_path=root / "out", judge_base_url=judge.base_url,
                            cache_path=root / "cache.sqlite")
    return root, run


@pytest.mark.slow
def test_runs_and_the_leaderboard_are_the_ones_the_command_reads_and_writes(one_run, tmp_path):
    root, run = one_run
    runs, warnings = load_runs(run.output_path)
    assert ([r.name for r in runs], warnings) == (["good"], [])
    task = runs[0].tasks["gveval_demo"]
    logged = {line["judged"]["item_id"]: line["gveval_mean"] for line in run.samples("gveval_demo")}
    assert task.n_items == 2 and sorted(task.values["gveval_mean"].tolist()) == sorted(logged.values())
    settings = LeaderboardSettings(n_resamples=200, n_permutations=99)
    board = build_leaderboard(runs, settings, warnings=warnings)
    assert [(row.name, row.rank) for row in board.rows] == [("good", 1)]
    assert board.rows[0].estimates[board.rank_column.key].value == pytest.approx(np.mean(list(logged.values())))
    files = write_leaderboard(board, tmp_path / "api")
    cli = run_capjudge("leaderboard", str(run.output_path), "--out", str(tmp_path / "cli"), "--resamples", "200",
                       "--permutations", "99")
    assert cli.returncode == 0, cli.stderr
    for name in ("leaderboard.md", "leaderboard.csv"):
        assert (tmp_path / "api" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
    assert files.markdown.read_text(encoding="utf-8") == leaderboard_markdown(board)


def test_correlation_is_scipys_on_the_complete_pairs():
    judge = [71.0, 40.5, None, 88.0, 12.0, 55.0, 63.0, 30.0]
    human = [4.0, 2.5, 3.0, 3.0, 1.0, 4.5, 2.0, 2.5]
    result = correlate(judge, human, annotators="mean", settings=BootstrapSettings(n_resamples=300, seed=3))
    x = np.array([j for j in judge if j is not None])
    y = np.array([h for j, h in zip(judge, human) if j is not None])
    expected = {"kendall_b": stats.kendalltau(x, y, variant="b"), "kendall_c": stats.kendalltau(x, y, variant="c"),
                "pearson": stats.pearsonr(x, y), "spearman": stats.spearmanr(x, y)}
    for name, scipy_result in expected.items():
        coefficient = result[name]
        assert coefficient.value == pytest.approx(scipy_result.statistic, abs=1e-12), name
        assert coefficient.p_value == pytest.approx(scipy_result.pvalue, abs=1e-12), name
        assert coefficient.n == 7 and coefficient.ci_low < coefficient.ci_high  # the item bootstrap's interval
    assert (result.missing.judge_missing, result.n_items) == (1, 7)


# ---------------------------------------------------------------------------------------------------------
# Sensitivity


def _scores_of(caption: str) -> tuple[int, int, int, int]:
    words = len(caption.split())
    return min(100, 30 + words), 50 + words % 7, max(0, 95 - 2 * words), 60


def test_sensitivity_judges_every_variant_with_the_configured_judge_and_reruns_from_the_cache(server, tmp_path,
                                                                                              monkeypatch):
    server.reset(lambda body: _gveval_reply(_scores_of(_gveval_caption(prompt_text(body)))))
    for name, value in {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": TEST_API_KEY,
                        "MODEL_VERSION": TEST_JUDGE_MODEL, "CAPJUDGE_CACHE": str(tmp_path / "cache.sqlite"),
                        "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CAPJUDGE_PANEL", raising=False)
    # 5 items: the small-sample rule's floor for a shift and its verdict (issue #60; 2 items gave a verdict).
    arguments = dict(captions=DEMO / "captions_good.jsonl", perturbations=["padding", "truncation"], limit=5,
                     resamples=200)
    report = run_sensitivity("gveval_demo", **arguments)
    counts = report.counts
    assert (counts.items, counts.perturbations, counts.unjudged) == (5, 2, 0)
    assert counts.requests == counts.judgments == len(server.log) == 15
    (scorer,) = report.scorers
    for item in report.items:
        for caption in (item.original, *item.variants):
            scores = caption.judgments[scorer].scores
            expected = _scores_of(caption.text)
            assert [scores[name] for name in ("accuracy", "completeness", "conciseness", "relevance")] == list(expected)
    assert {row.perturbation for row in report.rows} == {"padding", "truncation"}
    assert "padding" in sensitivity_table(report)

    again = run_sensitivity("gveval_demo", **arguments)
    assert (again.counts.requests, again.counts.cache_hits, len(server.log)) == (0, 15, 15)
    shifts = [[(row.perturbation, row.dimension, row.shift and row.shift.mean_shift) for row in each.rows]
              for each in (report, again)]
    assert shifts[0] == shifts[1] and any(shift for _, _, shift in shifts[0])


def test_sensitivity_refuses_what_the_command_refuses_before_any_judgment(server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("CAPJUDGE_CACHE", str(tmp_path / "cache.sqlite"))
    captions = DEMO / "captions_good.jsonl"
    for arguments, message in [({"perturbations": ["padding", "padding"]}, "perturbations: 'padding' given twice"),
                               ({"perturbations": ["sarcasm"]}, "no perturbation 'sarcasm'"),
                               ({"resamples": 5}, "resamples must be a whole number from 100"),
                               ({"limit": 0}, "limit must be a whole number from 1"),
                               ({"task": "gveval_dem"}, "no task 'gveval_dem'"),
                               ({"captions": tmp_path / "none.jsonl"}, "none.jsonl")]:
        with pytest.raises(ValueError, match=re.escape(message)):
            run_sensitivity(**{"task": "gveval_demo", "captions": captions, **arguments})
    assert server.log == []


# ---------------------------------------------------------------------------------------------------------
# The README's example


def test_the_readmes_python_example_runs_as_written(server, tmp_path, monkeypatch, capsys):
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8").split("\n## Python API\n", 1)[1]
    example = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    assert "from capjudge.api import" in example
    for name, value in {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": TEST_API_KEY,
                        "MODEL_VERSION": TEST_JUDGE_MODEL, "CAPJUDGE_CACHE": str(tmp_path / "cache.sqlite")}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(REPO_ROOT)  # its clips are the checkout's demo clips
    for run in (1, 2):
        exec(compile(example, "README.md (Python API)", "exec"), {})
        lines = capsys.readouterr().out.splitlines()
        assert [line.split()[0] for line in lines] == ["g01", "g02"]
        assert all("'mean':" in line and line.endswith("True" if run == 2 else "False") for line in lines), lines
    assert len(server.log) == 2
