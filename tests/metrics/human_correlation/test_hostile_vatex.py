"""Hostile inputs to `capjudge vatex` and the MSVD-Eval / correlate readers (issue #36): each is refused with
one line naming the file (and clip, line or item) and the problem, exit 2, no traceback; or, for a baseline
cache file that was changed after it was written, never used as scores.

- a clip id (or any key) twice in a VATEX-EVAL file, an item id twice in MSVD-Eval, a key twice on a scorer
  or correlate line: JSON readers keep the last copy silently, so the old code scored whichever came last;
- a baseline cache file whose scores were edited with its key kept: the old code printed the edited tau-b;
- a run whose logged captions are not the file's candidates (a run of another version of the file).

The files are small and written here; the one test that runs pycocoevalcap (Java) scores 6 candidates.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from capjudge.metrics.human_correlation.baselines import BASELINE_SCORERS
from capjudge.judges.datasets.vatex_eval import (
    load_vatex_eval,
    ratings_matrix,
)
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import run_capjudge
from tests.support.harness_runs import TEST_API_KEY, TEST_JUDGE_MODEL, judge_server, run_capjudge_cli
from tests.support.hostile import refusal_line
from tests.support.vatex_baselines_subset import baselines_json, baselines_subset
from scipy.stats import kendalltau

# Three clips of two candidates; ratings spread so that every coefficient is defined.
CLIPS = {
    "clipA_000001_000011": (["a man rides a horse across a field", "a dog sleeps"], [[5, 4, 5], [1, 2, 1]]),
    "clipB_000002_000012": (["two children play football on grass", "a kitchen"], [[4, 5, 4], [2, 1, 2]]),
    "clipC_000003_000013": (["a woman is slicing onions in a kitchen", "someone cooks"], [[5, 5, 4], [3, 3, 2]]),
}
REFERENCES = ["a scene of everyday life", "people and animals in a place"]


def _clip(clip_id: str, captions: list[str], ratings: list[list[int]]) -> str:
    """One clip as the published file writes it (scores as a string of float rows), as JSON text. Its first
    reference is close to its first candidate, so the classic baselines differ between candidates."""
    references = [f"{captions[0]} slowly", *REFERENCES]
    row = {"vid": clip_id, "cands": captions, "scores": str([[float(r) for r in row] for row in ratings]),
           "refs": [references]}
    return f"{json.dumps(clip_id)}: {json.dumps(row)}"


def _vatex_text(clips: dict, extra: list[str] = ()) -> str:
    """The file's text; `extra` members are appended as written (a JSON dict cannot hold a key twice)."""
    return "{" + ", ".join([_clip(clip_id, *row) for clip_id, row in clips.items()] + list(extra)) + "}"


def _write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def vatex_file(tmp_path):
    return _write(tmp_path / "vatex.json", _vatex_text(CLIPS))


def _scorer_file(path, candidates, scores):
    return _write(path, "".join(json.dumps({"clip_id": c.clip_id, "candidate_index": c.candidate_index, "score": s})
                                 + "\n" for c, s in zip(candidates, scores)))


# ---------------------------------------------------------------------------------------------------------
# 1. A key twice: the last copy no longer wins silently


def test_a_clip_twice_in_the_vatex_file_is_refused_naming_file_and_clip(tmp_path, vatex_file):
    """The old code kept the second clipB (ratings reversed) and printed tau-b from it, exit 0."""
    clip_b = "clipB_000002_000012"
    twice = _write(tmp_path / "twice.json", _vatex_text(CLIPS, [_clip(clip_b, CLIPS[clip_b][0], [[1, 1, 1], [5, 5, 5]])]))
    line = refusal_line(run_capjudge("vatex", str(twice), "--resamples", "0"), str(twice), repr(clip_b))
    assert line == (f"capjudge vatex: {twice}: clip id {clip_b!r} appears more than once in the file (a JSON reader "
                    "would keep only the last copy and drop the others silently)")
    # The same clips once each are read as before.
    assert run_capjudge("vatex", str(vatex_file), "--resamples", "0").returncode == 0


def test_a_key_twice_inside_a_clip_is_refused_naming_the_key(tmp_path):
    clip_id = "clipA_000001_000011"
    row = json.dumps({"vid": clip_id, "cands": ["a man rides a horse", "a dog sleeps"], "scores": "[[5, 4, 5], [1, 2, 1]]",
                      "refs": [REFERENCES]})
    doubled = row[:-1] + ', "scores": "[[1, 1, 1], [5, 5, 5]]"}'
    path = _write(tmp_path / "inner.json", "{" + f"{json.dumps(clip_id)}: {doubled}" + "}")
    refusal_line(run_capjudge("vatex", str(path), "--resamples", "0"), str(path), "key 'scores'", "more than once")


def test_a_key_twice_on_a_scorer_line_is_refused_naming_the_line(tmp_path, vatex_file):
    scorer = _write(tmp_path / "scores.jsonl",
                    '{"clip_id": "clipA_000001_000011", "candidate_index": 0, "score": 1, "score": 5}\n')
    refusal_line(run_capjudge("vatex", str(vatex_file), str(scorer), "--resamples", "0"),
                 f"{scorer}, line 1", "key 'score' appears more than once")


def _msvd_item(item_id: str, mean: float) -> str:
    row = {"vname": item_id, "ref": ["a reference"], "candidate": f"caption of {item_id}",
           "human_score": [[mean, mean, mean, mean, mean], [mean, mean, mean, mean, mean]]}
    return f"{json.dumps(item_id)}: {json.dumps(row)}"


def test_an_item_twice_in_msvd_eval_is_refused_naming_file_and_item(tmp_path):
    msvd = _write(tmp_path / "MSVD-Eval.json",
                  "{" + ", ".join([_msvd_item("vid1", 1.0), _msvd_item("vid2", 3.0), _msvd_item("vid1", 5.0)]) + "}")
    scores = _write(tmp_path / "judge.jsonl", '{"id": "vid1", "j": 1}\n{"id": "vid2", "j": 2}\n')
    done = run_capjudge("correlate", "--msvd-eval", str(msvd), "--judge-scores", str(scores), "--bootstrap", "0")
    refusal_line(done, str(msvd), "item id 'vid1' appears more than once")


def test_the_msvd_eval_task_loader_refuses_an_item_twice_too(tmp_path):
    from capjudge.judges.datasets.items import DatasetError
    from capjudge.judges.datasets.msvd_eval import read_msvd_eval_file

    msvd = _write(tmp_path / "MSVD-Eval.json",
                  "{" + ", ".join([_msvd_item("vid1", 1.0), _msvd_item("vid2", 3.0), _msvd_item("vid1", 5.0)]) + "}")
    with pytest.raises(DatasetError, match=r"item id 'vid1' appears more than once in the file"):
        read_msvd_eval_file(msvd)
    once = _write(tmp_path / "once.json", "{" + ", ".join([_msvd_item("vid1", 1.0), _msvd_item("vid2", 3.0)]) + "}")
    assert [record["id"] for record in read_msvd_eval_file(once)] == ["vid1", "vid2"]


def test_a_field_twice_on_a_correlate_line_is_refused(tmp_path):
    path = _write(tmp_path / "rows.jsonl", "".join(
        json.dumps({"id": f"v{i}", "good": i % 3, "human": i % 4}) + "\n" for i in range(5))
        + '{"id": "v5", "good": 1, "human": 2, "good": 3}\n')
    done = run_capjudge("correlate", str(path), "--judge", "good", "--human", "human", "--bootstrap", "0")
    refusal_line(done, f"{path}, line 6", "key 'good' appears more than once")


def test_an_annotator_who_rates_every_candidate_alike_is_one_line_naming_the_file(tmp_path):
    """Every coefficient against that annotator is undefined; this was a VatexProtocolError traceback, exit 1."""
    alike = {clip_id: (captions, [[row[0], row[1], 3] for row in ratings]) for clip_id, (captions, ratings) in CLIPS.items()}
    path = _write(tmp_path / "alike.json", _vatex_text(alike))
    line = refusal_line(run_capjudge("vatex", str(path), "--resamples", "0"), str(path), "annotator 3")
    assert line == (f"capjudge vatex: {path}: annotator 3 rates all 6 candidates correlated 3: no correlation with "
                    "their ratings is defined")


# ---------------------------------------------------------------------------------------------------------
# 2. Baseline cache files carry a digest of their contents


def _cache_record(path_key: str, n: int, scores: dict[str, list[float]]) -> dict:
    from capjudge.metrics.human_correlation.baseline_cache import (
        CACHE_FORMAT,
        pycocoevalcap_version,
    )

    return {"format": CACHE_FORMAT, "key": path_key, "label": "test", "pycocoevalcap": pycocoevalcap_version(),
            "n_items": n, "data": "", "seconds": 1.0, "scores": scores}


def _flipped(record: dict, metric: str) -> dict:
    """The record with one metric's scores negated, every other field (the digest included) kept."""
    return {**record, "scores": {**record["scores"], metric: [-v for v in record["scores"][metric]]}}


def test_read_cache_uses_only_files_whose_contents_match_their_digest(tmp_path):
    from capjudge.metrics.human_correlation.baseline_cache import read_cache, sealed

    ids = ("a#0", "a#1", "b#0")
    record = _cache_record("k" * 64, 3, {name: [0.1, 0.5, 0.9] for name in BASELINE_SCORERS})
    path = tmp_path / "cache.json"
    path.write_text(json.dumps(sealed(record)))
    assert read_cache(path, "k" * 64, ids)[0] is not None
    # One metric's scores flipped, key and digest kept (what issue #36 did by hand).
    path.write_text(json.dumps(_flipped(sealed(record), "CIDEr")))
    cached, problem = read_cache(path, "k" * 64, ids)
    assert cached is None and "do not match its sha256 digest" in problem, problem
    # A file of the format before digests, and one of this format without its digest: stale, never trusted.
    path.write_text(json.dumps({**record, "format": 2}))
    assert read_cache(path, "k" * 64, ids) == (None, "cache file is not in cache format 3 (an older capjudge's has no digest)")
    path.write_text(json.dumps(record))
    assert "sha256" in read_cache(path, "k" * 64, ids)[1]
    # A key twice ("scores" written twice) is a corrupt file, whatever the digest says.
    text = json.dumps(sealed(record))
    path.write_text(text[:-1] + ', "scores": {}}')
    assert read_cache(path, "k" * 64, ids) == (None, "cache file is unreadable or corrupt (DuplicateKey)")


def _plant_caches(cache_dir, candidates, scores_of) -> dict[int, object]:
    """A sealed cache file for both reference settings at the path the data's content keys it to."""
    from capjudge.metrics.human_correlation.baseline_cache import (
        pycocoevalcap_version,
        sealed,
    )
    from capjudge.metrics.human_correlation.vatex_baselines import (
        REFERENCE_SETTINGS,
        vatex_cache_key,
        cache_path,
    )

    cache_dir.mkdir(exist_ok=True)
    paths = {}
    for references in REFERENCE_SETTINGS:
        key = vatex_cache_key(candidates, references, pycocoevalcap_version())
        record = _cache_record(key, len(candidates), {name: list(scores_of(name)) for name in BASELINE_SCORERS})
        paths[references] = cache_path(cache_dir, candidates, references)
        paths[references].write_text(json.dumps(sealed(record)))
    return paths


def _hidden_pycocoevalcap(tmp_path) -> dict[str, str]:
    """An environment in which pycocoevalcap cannot be imported (its metadata stays): nothing can be recomputed."""
    hidden = tmp_path / "hide" / "pycocoevalcap"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ModuleNotFoundError('pycocoevalcap hidden by the test')\n")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(hidden.parent), os.environ.get("PYTHONPATH")]))}


def _cider_tau(done) -> float:
    report = json.loads(done.stdout)
    row = next(row for row in report["baselines"] if row["name"] == "CIDEr (1 ref)")
    return row["protocols"][0]["statistics"][0]["value"]


def test_flipped_cache_scores_are_never_printed(tmp_path, vatex_file):
    """Issue #36: one metric's scores negated in a cache file, its key kept, flipped the printed tau-b, exit 0.
    Now the file does not match its digest, so it is not used: with pycocoevalcap unimportable (so this test
    needs no Java) it cannot be recomputed, and the run stops with the warning naming the file and the usual
    'baselines unavailable' line, printing no coefficient."""
    candidates = load_vatex_eval(vatex_file)
    by_rating = ratings_matrix(candidates).mean(axis=1)
    paths = _plant_caches(tmp_path / "cache", candidates, lambda name: by_rating / 5)
    args = ("vatex", str(vatex_file), "--baselines", "--cache-dir", str(tmp_path / "cache"), "--resamples", "0",
            "--format", "json")
    env = _hidden_pycocoevalcap(tmp_path)
    honest = run_capjudge(*args, env=env, warm=False)
    assert honest.returncode == 0, honest.stderr
    assert _cider_tau(honest) > 0.8  # the planted scores are read (they follow the ratings)
    record = json.loads(paths[1].read_text())
    paths[1].write_text(json.dumps(_flipped(record, "CIDEr")))
    done = run_capjudge(*args, env=env, warm=False)
    assert done.stdout == "" and "Traceback" not in done.stderr
    warning = refusal_line(done, str(paths[1]), "sha256", status=1)
    assert warning == (f"capjudge vatex: {paths[1]}: cache file's contents do not match its sha256 digest (changed "
                       "since it was written); not used: recomputed and replaced")
    assert done.stderr.strip().splitlines()[-1].startswith("capjudge vatex: baselines unavailable")


@pytest.mark.slow
def test_a_flipped_cache_is_recomputed_and_the_printed_tau_is_unchanged(tmp_path, tmp_path_factory, worker_id):
    """The same edit where pycocoevalcap can run, on a copy of the real 20-clip subset's computed cache
    (tests/support/vatex_baselines_subset.py): one warning line naming the file, the 1-reference scores
    recomputed (pycocoevalcap, Java, 120 candidates), the printed tau-b exactly what it was before the edit."""
    from capjudge.metrics.human_correlation.vatex_baselines import cache_path

    subset = baselines_subset(tmp_path_factory, worker_id)
    cache = shutil.copytree(subset.cache_dir, tmp_path / "cache")
    path = cache_path(cache, load_vatex_eval(subset.data), 1)
    path.write_text(json.dumps(_flipped(json.loads(path.read_text()), "CIDEr")))
    again = baselines_json(subset.data, cache)
    assert again.returncode == 0, again.stderr
    warning = (f"capjudge vatex: {path}: cache file's contents do not match its sha256 digest (changed since it "
               "was written); not used: recomputed and replaced")
    assert [line for line in again.stderr.splitlines() if "not used" in line] == [warning]
    assert _cider_tau(again) == _cider_tau(subset.first)
    # The replaced file is sealed again: a third run reads it without a word.
    third = baselines_json(subset.data, cache)
    assert third.returncode == 0 and "not used" not in third.stderr and "computing" not in third.stderr


# ---------------------------------------------------------------------------------------------------------
# 3. A run's logged captions must be the file's candidates


@pytest.fixture(scope="module")
def vatex_run(tmp_path_factory):
    """`capjudge judge` of the small file's 6 candidates with gveval_vatex_references, judged by the test server."""
    root = tmp_path_factory.mktemp("vatex_run")
    data = _write(root / "vatex.json", _vatex_text(CLIPS))
    captions = _write(root / "captions.jsonl", "".join(
        json.dumps({"id": f"{c.clip_id}#{c.candidate_index}", "caption": c.caption}) + "\n" for c in load_vatex_eval(data)))
    env = {"OPENAI_API_KEY": TEST_API_KEY, "MODEL_VERSION": TEST_JUDGE_MODEL, "CAPJUDGE_CACHE": str(root / "cache.sqlite"),
           "CAPJUDGE_GVEVAL_SCORING": "text", "CAPJUDGE_VATEX_EVAL_JSON": str(data), "HF_DATASETS_OFFLINE": "1",
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(root / "hf"), "PATH": "/usr/bin:/bin", "HOME": str(root)}
    with judge_server() as judge:
        env["OPENAI_BASE_URL"] = judge.base_url
        done = run_capjudge_cli(["judge", "--captions", str(captions), "--task", "gveval_vatex_references",
                                 "--out", str(root / "run")], env=env, cwd=REPO_ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return data, root / "run"


def test_a_run_of_the_same_file_is_read(vatex_run):
    data, run = vatex_run
    done = run_capjudge("vatex", str(data), str(run), "--resamples", "0", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["n_candidates"] == 6


def test_a_run_of_another_version_of_the_file_is_refused_naming_run_item_and_captions(vatex_run, tmp_path):
    """The old code correlated the run's scores with the ratings of captions the judge never saw, exit 0."""
    _, run = vatex_run
    edited = {**CLIPS, "clipB_000002_000012": (["two children play football on grass", "an empty kitchen"],
                                               CLIPS["clipB_000002_000012"][1])}
    other = _write(tmp_path / "other_version.json", _vatex_text(edited))
    done = run_capjudge("vatex", str(other), str(run), "--resamples", "0")
    (samples,) = run.rglob("*_samples_gveval_vatex_references.jsonl")
    line = refusal_line(done, str(samples), "item clipB_000002_000012#1")
    assert line.endswith("the run's caption 'a kitchen' is not the VATEX-EVAL file's candidate 'an empty kitchen' "
                         "(a run of another version of the file?)"), line
    assert done.stdout == ""


def test_a_run_whose_samples_were_edited_is_refused(vatex_run, tmp_path):
    """The same check holds when the run's own log was edited (the judged caption replaced)."""
    data, run = vatex_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    (samples,) = copy.rglob("*_samples_gveval_vatex_references.jsonl")
    lines = [json.loads(text) for text in samples.read_text(encoding="utf-8").splitlines()]
    lines[0]["judged"]["judgment"]["caption"] = "something else entirely"
    samples.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    done = run_capjudge("vatex", str(data), str(copy), "--resamples", "0")
    refusal_line(done, f"{samples}, line 1", "'something else entirely'", "is not the VATEX-EVAL file's candidate")


def test_the_scores_still_match_the_jsonl_route(vatex_run, tmp_path):
    """The caption check changes no number: the run and the same scores as a JSONL give the same rows."""
    data, run = vatex_run
    (samples,) = run.rglob("*_samples_gveval_vatex_references.jsonl")
    lines = [json.loads(text) for text in samples.read_text(encoding="utf-8").splitlines()]
    scorer = _write(tmp_path / "scores.jsonl", "".join(json.dumps({
        "clip_id": line["judged"]["item_id"].rsplit("#", 1)[0], "candidate_index": int(line["judged"]["item_id"].rsplit("#", 1)[1]),
        "score": line["gveval_mean"]}) + "\n" for line in lines))

    def rows(source):
        done = run_capjudge("vatex", str(data), str(source), "--resamples", "0", "--format", "json")
        assert done.returncode == 0, done.stderr
        return [{k: v for k, v in row.items() if k not in ("name", "source")} for row in json.loads(done.stdout)["scorers"]]

    assert rows(run) == rows(scorer)
    values = np.array([line["gveval_mean"] for line in lines], dtype=float)
    assert np.isfinite(values).all()
    ratings = ratings_matrix(load_vatex_eval(data))
    expected = np.mean([kendalltau(values, ratings[:, a]).statistic for a in range(3)])
    assert rows(run)[0]["protocols"][0]["statistics"][0]["value"] == pytest.approx(expected, abs=1e-12)
