"""`capjudge correlate` and `capjudge agreement` given scores no judge could give, flags that name nothing, and
output paths that do not exist yet: one line naming the file, line, item, field or flag, exit 2, nothing
written; never a traceback, never a silent result.

Correlate reads JSONL written here; agreement reads a real `capjudge judge` run (judged by the test server)
copied twice, one copy's samples edited as a careless or hostile source would.
"""

from __future__ import annotations

import json
import shutil

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import run_capjudge
from tests.support.harness_runs import TEST_API_KEY, TEST_JUDGE_MODEL, judge_server, run_capjudge_cli

N_ROWS = 12


def _rows() -> list[dict]:
    return [{"id": f"v{i}", "good": float(i % 5 + 1), "silent": None, "human": [i % 5 + 1, (i + 1) % 5 + 1]}
            for i in range(N_ROWS)]


def _write_jsonl(path, rows, raw_lines: dict[int, str] | None = None):
    """rows as JSONL; raw_lines replaces line numbers (1-based) by text as written (JSON has no 10**400 literal
    in Python's json.dumps of floats, and NaN/Infinity are what Python writes for those floats)."""
    lines = [json.dumps(row) for row in rows]
    for number, text in (raw_lines or {}).items():
        lines[number - 1] = text
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _correlate(*args: str):
    return run_capjudge("correlate", *args, "--bootstrap", "50", timeout=300)


def _one_line_error(done, *wanted: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout[-500:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for text in wanted:
        assert text in lines[0], (text, lines[0])


# ---------------------------------------------------------------------------------------------------------
# correlate: scores that are no score


@pytest.mark.parametrize(("field", "written", "said"), [
    ("good", str(10**400), "too large for a floating-point number"),  # OverflowError on the original code
    ("good", "-1e308", "not a plausible score"),  # was correlated as it is
    ("good", "Infinity", "not a plausible score"),  # was dropped as if missing, silently
    ("good", '"high"', "expected a number or null"),  # was exit 1
    ("human", f"[3, {10**400}]", "too large for a floating-point number"),
    ("human", "[3, -Infinity]", "not a plausible score"),
])
def test_a_score_that_is_no_number_is_one_line_naming_file_line_and_field(tmp_path, field, written, said):
    rows = _rows()
    line = json.dumps({**rows[2], field: "PLACEHOLDER"}).replace('"PLACEHOLDER"', written)
    path = _write_jsonl(tmp_path / "scores.jsonl", rows, {3: line})
    output = tmp_path / "report.json"
    done = _correlate(str(path), "--judge", "good", "--human", "human", "--format", "json", "--output", str(output))
    _one_line_error(done, f"{path}, line 3", said)
    assert ("field 'good'" in done.stderr) if field == "good" else ("human score, annotator 1" in done.stderr)
    assert done.stdout == "" and not output.exists()


def test_nan_scores_are_missing_values_counted_and_a_judge_without_any_score_is_said(tmp_path):
    """NaN is a missing value, as null is (the library's contract): dropped pairwise and counted. A judge with
    no score at all is still reported (undefined, with the reason), and stderr names it."""
    rows = _rows()
    raw = {n: json.dumps({**rows[n - 1], "good": "X", "silent": "X"}).replace('"X"', "NaN") for n in (1, 2)}
    for n in range(3, N_ROWS + 1):
        raw[n] = json.dumps({**rows[n - 1], "silent": "X"}).replace('"X"', "NaN")
    path = _write_jsonl(tmp_path / "scores.jsonl", rows, raw)
    done = _correlate(str(path), "--judge", "good", "--judge", "silent", "--human", "human", "--format", "json")
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["_details"]["good"]["human"]["missing"]["judge_missing"] == 2
    assert report["good"]["human"]["n"] == 2 * (N_ROWS - 2)
    assert report["silent"]["human"]["kendall_b"]["value"] is None
    assert report["_details"]["silent"]["human"]["missing"]["judge_missing"] == N_ROWS
    assert "--judge silent: no item has a score (all null or NaN)" in done.stderr
    assert "--judge good" not in done.stderr


# ---------------------------------------------------------------------------------------------------------
# correlate: flags


def test_a_judge_field_no_line_has_is_an_error_naming_the_flag_like_a_misspelt_human(tmp_path):
    path = _write_jsonl(tmp_path / "scores.jsonl", _rows())
    misspelt = _correlate(str(path), "--judge", "goood", "--human", "human")
    _one_line_error(misspelt, "--judge goood", str(path), "'goood'", "good")  # the fields it does have
    assert misspelt.stdout == ""
    human = _correlate(str(path), "--judge", "good", "--human", "humna")
    _one_line_error(human, "'humna'", str(path))
    # A field every line has but holds null on is a scorer without scores, not a misspelling: reported.
    silent = _correlate(str(path), "--judge", "silent", "--human", "human")
    assert silent.returncode == 0 and "undefined (only 0 complete pair(s)" in silent.stdout


def test_negative_seed_and_bootstrap_name_their_flag(tmp_path):
    path = _write_jsonl(tmp_path / "scores.jsonl", _rows())
    _one_line_error(_correlate(str(path), "--judge", "good", "--human", "human", "--seed", "-5"), "--seed", "-5")
    bootstrap = run_capjudge("correlate", str(path), "--judge", "good", "--human", "human", "--bootstrap", "-1")
    _one_line_error(bootstrap, "--bootstrap", "-1")


# ---------------------------------------------------------------------------------------------------------
# correlate: where the report goes


def test_output_into_a_missing_folder_is_created_and_written_whole(tmp_path):
    path = _write_jsonl(tmp_path / "scores.jsonl", _rows())
    output = tmp_path / "new" / "deeper" / "report.json"
    done = _correlate(str(path), "--judge", "good", "--human", "human", "--format", "json", "--output", str(output))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(output.read_text(encoding="utf-8"))["good"]["human"]["n"] == 2 * N_ROWS
    assert sorted(p.name for p in output.parent.iterdir()) == ["report.json"]  # no probe or partial file left


def test_output_that_cannot_be_a_file_is_refused_before_any_work(tmp_path):
    path = _write_jsonl(tmp_path / "scores.jsonl", _rows())
    blocker = tmp_path / "a-file"
    blocker.write_text("keep me", encoding="utf-8")
    folder = tmp_path / "a-folder"
    folder.mkdir()
    for target, said in ((blocker / "report.md", "cannot write there"), (folder, "is a folder")):
        done = _correlate(str(path), "--judge", "good", "--human", "human", "--output", str(target))
        _one_line_error(done, f"--output {target}", said)
        assert done.stdout == ""
    assert blocker.read_text(encoding="utf-8") == "keep me" and list(folder.iterdir()) == []


# ---------------------------------------------------------------------------------------------------------
# agreement: a real run, copied, one copy edited


TASK = "gveval_demo"
METRIC = "gveval_accuracy"


@pytest.fixture(scope="module")
def judged_run(tmp_path_factory):
    """One `capjudge judge` run of the demo task's good captions (10 items), judged by the test server."""
    root = tmp_path_factory.mktemp("agreement")
    env = {"OPENAI_BASE_URL": "", "OPENAI_API_KEY": TEST_API_KEY, "MODEL_VERSION": TEST_JUDGE_MODEL,
           "CAPJUDGE_CACHE": str(root / "cache.sqlite"), "CAPJUDGE_GVEVAL_SCORING": "text", "HF_DATASETS_OFFLINE": "1",
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(root / "hf"), "PATH": "/usr/bin:/bin", "HOME": str(root)}
    with judge_server() as judge:
        env["OPENAI_BASE_URL"] = judge.base_url
        done = run_capjudge_cli(
            ["judge", "--captions",
             str(REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"), "--task", TASK, "--out", str(root / "run")],
            env=env, cwd=REPO_ROOT, timeout=600,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "run"


def _two_judges(judged_run, tmp_path, edit):
    """first = the run as judged; second = a copy whose samples file is passed through edit(lines)."""
    first, second = tmp_path / "first", tmp_path / "second"
    shutil.copytree(judged_run, first)
    shutil.copytree(judged_run, second)
    (samples,) = second.rglob(f"*_samples_{TASK}.jsonl")
    lines = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]
    text = "".join(line + "\n" for line in edit(lines))
    samples.write_text(text, encoding="utf-8")
    return first, second, samples


def _agreement(first, second):
    return run_capjudge("agreement", str(first), str(second), "--task", TASK, "--metric", METRIC, "--resamples", "50",
                        timeout=300)


def _with_value(lines, position, written):
    """Every line as JSON text, line `position`'s metric value written as the raw text `written`."""
    out = [json.dumps(line) for line in lines]
    out[position] = json.dumps({**lines[position], METRIC: "PLACEHOLDER"}).replace('"PLACEHOLDER"', written)
    return out


@pytest.mark.parametrize("written", [
    str(10**400),  # OverflowError on the original code
    "-1e308",  # printed "-inf [nan, nan]" on the original code
    '"n/a"',  # was dropped as if unjudged, without a word
    "NaN",
])
def test_agreement_refuses_a_value_that_is_no_score_naming_file_and_item(judged_run, tmp_path, written):
    first, second, samples = _two_judges(judged_run, tmp_path, lambda lines: _with_value(lines, 3, written))
    done = _agreement(first, second)
    _one_line_error(done, str(samples), "g04", METRIC)
    assert done.stdout == ""


def test_agreement_with_no_value_in_a_run_names_its_samples_file(judged_run, tmp_path):
    """Every item unjudged (null) under one judge: nothing to compare is an error, not a table of n = 0."""
    def all_unjudged(lines):
        return [json.dumps({**line, METRIC: None}) for line in lines]

    first, second, samples = _two_judges(judged_run, tmp_path, all_unjudged)
    done = _agreement(first, second)
    _one_line_error(done, str(samples), f"no item has a value of '{METRIC}' (all 10 unjudged)")


def test_agreement_says_which_items_it_left_out(judged_run, tmp_path):
    def two_unjudged(lines):
        return [json.dumps({**line, METRIC: None} if n in (0, 5) else line) for n, line in enumerate(lines)]

    first, second, samples = _two_judges(judged_run, tmp_path, two_unjudged)
    done = _agreement(first, second)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| captions_good | 8 |" in done.stdout
    assert f"Left out (no value of the metric: unjudged): {samples}: 2 of 10 items." in done.stdout


def test_agreement_and_reliability_name_a_negative_seed(judged_run, tmp_path):
    _one_line_error(_agreement_with(judged_run, "--seed", "-5"), "--seed", "-5")
    _one_line_error(_agreement_with(judged_run, "--resamples", "-1"), "--resamples", "-1")
    reliability = run_capjudge("reliability", str(judged_run), "--task", TASK, "--seed", "-5")
    _one_line_error(reliability, "--seed", "-5")


def _agreement_with(run, *extra: str):
    return run_capjudge("agreement", str(run), str(run), "--task", TASK, "--metric", METRIC, *extra, timeout=300)
