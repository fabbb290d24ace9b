"""Run the real lmms-eval CLI from tests, against a local judge, and find what it wrote.

    with judge_server() as judge:                      # the OpenAI-compatible test server, in this process
        run = run_lmms_eval(
            model="captions_file", model_args="path=preds.jsonl", tasks="gveval",
            output_path=tmp_path / "out", judge_base_url=judge.base_url, cache_path=tmp_path / "cache.sqlite",
        )
    run.results()["results"]["gveval"], run.samples("gveval")

`judge_server(mode="thread")` serves from a thread of the test process (its request log can be asserted on);
`mode="process"` starts `tests/support/openai_server.py` in its own process (ServerProcess) (for benchmarks or when the test process must
stay idle). The subprocess gets the judge through the environment capjudge reads (OPENAI_BASE_URL,
OPENAI_API_KEY, MODEL_VERSION, CAPJUDGE_CACHE), offline Hugging Face settings and a datasets cache of its own.

lmms-eval 0.7.x catches errors inside an evaluation, prints them and still exits 0, so a run counts as
successful only when it wrote a new results file; otherwise `HarnessRunError` carries the output's tail.

Launches are warm by default (tests/support/warm_launch.py: a child forked from a process that has imported lmms-eval
and capjudge, which saves ~10 s of CPU each); `warm=False` runs the real command line, for tests that must
kill or signal the process, or that test the entry point itself.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tests.support.paths import REPO_ROOT
from tests.support.warm_launch import warm_run

REPO_TASKS = REPO_ROOT / "tasks"
TEST_JUDGE_MODEL = "test-judge"
TEST_API_KEY = "sk-test-key"
_OUTPUT_TAIL = 4000


# A judging process for budget tests and benchmarks: `python -c TEXT_JUDGE_SCRIPT N OFFSET WORDS MAX_TOKENS`
# judges N text requests (MAX_TOKENS 0: without max_tokens) through a JudgeClient configured from the
# environment and prints one JSON line
# {"pid", "judged", "failures"}. Several at once, sharing CAPJUDGE_CACHE's folder, share one budget.
TEXT_JUDGE_SCRIPT = """
import json, os, sys
from capjudge.judges.client.judge_client import JudgeClient
from capjudge.judges.client.config import JudgeConfig
from capjudge.judges.types import ChatRequest
n, offset, words, max_tokens = (int(a) for a in sys.argv[1:5])
client = JudgeClient(JudgeConfig.from_env(model="test-judge"))
params = {"max_tokens": max_tokens} if max_tokens > 0 else {}  # 0: no max_tokens (the API reserves its default)
requests = [ChatRequest(parts=(f"item {offset + i}: judge this caption " + "word " * words,), params=params)
            for i in range(n)]
outcomes = client.judge_many(requests, lambda reply: reply.content, judge_version="text-judge-script")
print(json.dumps({"pid": os.getpid(), "judged": sum(o.ok for o in outcomes),
                  "failures": [o.failure.kind for o in outcomes if not o.ok]}))
"""


def venv_python() -> str:
    candidate = REPO_ROOT / ".venv" / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


# ---------------------------------------------------------------------------------------------------------
# The judge
# ---------------------------------------------------------------------------------------------------------


@contextmanager
def judge_server(mode: Literal["thread", "process"] = "thread", **options: Any) -> Iterator[Any]:
    """A running test judge with a `base_url`; in thread mode it is the `OpenAITestServer` itself."""
    from tests.support.openai_server import OpenAITestServer, ServerProcess

    if mode == "process":
        with ServerProcess(python=venv_python(), **options) as server:
            yield server
        return

    with OpenAITestServer(**options) as server:
        yield server


# ---------------------------------------------------------------------------------------------------------
# lmms-eval
# ---------------------------------------------------------------------------------------------------------


class HarnessRunError(RuntimeError):
    """lmms-eval did not write results; the message holds the command and the end of its output."""


@dataclass(frozen=True)
class HarnessOutcome:
    """What one lmms-eval invocation did, successful or not."""

    command: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    output_path: Path
    new_results_files: tuple[Path, ...]

    @property
    def output(self) -> str:
        return self.stdout + "\n" + self.stderr

    def require_results(self) -> HarnessRun:
        """The run's files whatever the exit status (a run over CAPJUDGE_MAX_FAILURE_RATE exits non-zero
        after writing them)."""
        return self._run(require_success=False)

    def require_run(self) -> HarnessRun:
        return self._run(require_success=True)

    def _run(self, require_success: bool) -> HarnessRun:
        if (require_success and self.returncode != 0) or len(self.new_results_files) != 1:
            found = f"{len(self.new_results_files)} new results files"
            raise HarnessRunError(
                f"lmms-eval exited {self.returncode} with {found}\ncommand: {' '.join(self.command)}\n"
                f"--- output (end) ---\n{self.output[-_OUTPUT_TAIL:]}"
            )
        results_file = self.new_results_files[0]
        date_id = results_file.name[: -len("_results.json")]
        samples = {
            path.name[len(f"{date_id}_samples_") : -len(".jsonl")]: path
            for path in results_file.parent.glob(f"{date_id}_samples_*.jsonl")
        }
        return HarnessRun(self, results_file.parent, results_file, samples)


@dataclass(frozen=True)
class HarnessRun:
    """A successful run: the model subfolder lmms-eval wrote, its results JSON and per-task samples JSONL."""

    outcome: HarnessOutcome
    run_dir: Path
    results_file: Path
    samples_files: Mapping[str, Path]

    @property
    def output_path(self) -> Path:
        return self.outcome.output_path

    def results(self) -> dict[str, Any]:
        return json.loads(self.results_file.read_text(encoding="utf-8"))

    def samples(self, task: str) -> list[dict[str, Any]]:
        if task not in self.samples_files:
            raise KeyError(f"no samples file for task {task!r} (have {sorted(self.samples_files)}); was --log_samples given?")
        with self.samples_files[task].open(encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]


def harness_env(
    judge_base_url: str,
    *,
    cache_path: Path,
    datasets_cache: Path,
    judge_model: str = TEST_JUDGE_MODEL,
    api_key: str = TEST_API_KEY,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The subprocess environment: this one, the judge settings, and an offline, private datasets cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_URL", "CAPJUDGE_NO_CACHE", "API_TYPE")}
    env.update(
        OPENAI_BASE_URL=judge_base_url,
        OPENAI_API_KEY=api_key,
        MODEL_VERSION=judge_model,
        CAPJUDGE_CACHE=str(cache_path),
        HF_DATASETS_CACHE=str(datasets_cache),
        LMMS_EVAL_DATASETS_CACHE=str(datasets_cache),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra or {})
    return env


def launch_lmms_eval(
    *,
    model: str,
    model_args: str,
    tasks: str | Sequence[str],
    output_path: Path,
    judge_base_url: str,
    cache_path: Path | None = None,
    include_path: Path | None = REPO_TASKS,
    limit: int | None = None,
    log_samples: bool = True,
    verbosity: str = "WARNING",
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 600.0,
    warm: bool = True,
) -> HarnessOutcome:
    """Run `python -m lmms_eval ...` once and report what happened (it never raises on a failed run)."""
    output_path = Path(output_path)
    output_path.mkdir(parents=True, exist_ok=True)
    task_list = tasks if isinstance(tasks, str) else ",".join(tasks)
    command = [venv_python(), "-m", "lmms_eval", "--model", model, "--model_args", model_args, "--tasks", task_list,
               "--output_path", str(output_path), "--verbosity", verbosity]
    if include_path is not None:
        command += ["--include_path", str(include_path)]
    if log_samples:
        command.append("--log_samples")
    if limit is not None:
        command += ["--limit", str(limit)]
    command += list(extra_args)
    _wait_for_a_new_second(output_path)
    before = _results_files(output_path)
    environment = harness_env(
        judge_base_url,
        cache_path=cache_path or output_path.parent / "judge_cache.sqlite",
        datasets_cache=output_path.parent / "hf_datasets_cache",
        extra=env,
    )
    if warm:
        completed = warm_run("lmms_eval", command[3:], env=environment, cwd=REPO_ROOT, timeout=timeout)
    else:
        completed = subprocess.run(
            command, cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=timeout,
            check=False,  # a failed run is reported by HarnessOutcome, not raised here
        )
    _last_end[output_path.resolve()] = time.time()
    after = _results_files(output_path)
    new_files = tuple(sorted(path for path, written in after.items() if before.get(path) != written))
    return HarnessOutcome(tuple(command), completed.returncode, completed.stdout, completed.stderr, output_path, new_files)


# When the last run into each output folder returned. lmms-eval names a run's files after the second it
# started and APPENDS samples to `<date>_samples_<task>.jsonl`: two runs started in the same second into one
# folder share a results file and mix their samples (a flake seen twice: a fast rerun after a run that failed
# fast). A run that starts after the second in which the previous one ended cannot share its start second.
_last_end: dict[Path, float] = {}


def _wait_for_a_new_second(output_path: Path) -> None:
    ended = _last_end.get(output_path.resolve())
    if ended is not None:
        time.sleep(max(0.0, math.floor(ended) + 1 - time.time()))


def _results_files(output_path: Path) -> dict[Path, tuple[int, int]]:
    """Every results file under `output_path` with what identifies one write of it. lmms-eval names its files
    to the second, so a run that ends in the second another run's file is named after writes under that
    same name: compared by name alone, such a run looked as if it had written nothing (a flake seen once)."""
    found = {}
    for path in output_path.rglob("*_results.json"):
        stat = path.stat()
        found[path] = (stat.st_ino, stat.st_mtime_ns)
    return found


def run_lmms_eval(**kwargs: Any) -> HarnessRun:
    """`launch_lmms_eval`, raising `HarnessRunError` unless exactly one new results file was written."""
    return launch_lmms_eval(**kwargs).require_run()


# ---------------------------------------------------------------------------------------------------------
# capjudge
# ---------------------------------------------------------------------------------------------------------


def run_capjudge_cli(args: Sequence[str | Path], *, env: Mapping[str, str], cwd: Path = REPO_ROOT,
                     timeout: float = 600.0, warm: bool = True) -> subprocess.CompletedProcess[str]:
    """`python -m capjudge.tasks.cli ARGS` with exactly `env`, its output captured as text; never raises on a
    non-zero exit status. (`run_capjudge` below is this with the test process's environment.)"""
    arguments = [str(arg) for arg in args]
    if warm:
        return warm_run("capjudge", arguments, env=env, cwd=cwd, timeout=timeout)
    return subprocess.run([sys.executable, "-m", "capjudge.tasks.cli", *arguments], cwd=cwd, env=dict(env),
                          capture_output=True, text=True, timeout=timeout, check=False)


def run_capjudge(*args: str, stdin: str = "", env: dict[str, str] | None = None, timeout: float = 120,
                 warm: bool = True) -> subprocess.CompletedProcess[str]:
    """`capjudge ARGS` as a user runs it, from the repository root: warm (run_capjudge_cli) unless
    `warm=False` or it reads `stdin`, then a real subprocess. MODEL_VERSION is dropped from the inherited
    environment so a judge model set on the machine cannot change what the tests see."""
    environment = {key: value for key, value in os.environ.items() if key != "MODEL_VERSION"}
    environment.update(env or {})
    if not stdin:
        return run_capjudge_cli(args, env=environment, cwd=REPO_ROOT, timeout=timeout, warm=warm)
    return subprocess.run(
        [sys.executable, "-m", "capjudge.tasks.cli", *args],
        input=stdin, capture_output=True, text=True, cwd=REPO_ROOT, env=environment, timeout=timeout, check=False,
    )


# ---------------------------------------------------------------------------------------------------------
# A stand-in judged caption task
# ---------------------------------------------------------------------------------------------------------

# Until a test can use the real tasks/gveval folder, this task asks the judge (through the project's one
# client) with a G-VEval-shaped prompt the test server's rubric responder recognises, parses the four marked
# scores from the reply text, and emits the same per-item metrics the G-VEval task does.
_STAND_IN_UTILS = '''"""Stand-in judged caption task written by tests/support/harness_runs.py (no video: the judge sees text only)."""

from __future__ import annotations

import re

from capjudge.judges.client.registry import shared_client
from capjudge.judges.types import ChatRequest, ParseFailure

JUDGE_VERSION = "stand-in-gveval-1"
SETTINGS = {"temperature": 0.0}
DIMENSIONS = ("accuracy", "completeness", "conciseness", "relevance")
MARKERS = ("\\u03b1", "\\u03b2", "\\u03c8", "\\u03b4")


def doc_to_visual(doc):
    return []


def parse(reply):
    scores = []
    for marker in MARKERS:
        found = re.search(f"{marker}(\\\\d+){marker}", reply.content or "")
        if found is None:
            return ParseFailure("missing_marker", marker)
        scores.append(float(found.group(1)))
    return scores


def process_results(doc, results):
    client = shared_client()
    prompt = f"Rate the caption.\\nGenerated Caption: {results[0]}\\nYou should first give your reasons."
    outcome = client.judge(ChatRequest((prompt,), dict(SETTINGS)), parse, judge_version=JUDGE_VERSION)
    judge = {"model": client.config.model, "judge_version": JUDGE_VERSION, "settings": SETTINGS}
    if not outcome.ok:
        return {"gveval_mean": None, **{f"gveval_{d}": None for d in DIMENSIONS}, "gveval_failed": True, "judge": judge}
    scores = outcome.value
    return {
        "gveval_mean": sum(scores) / len(scores),
        **{f"gveval_{d}": s for d, s in zip(DIMENSIONS, scores)},
        "gveval_failed": False,
        "judge": judge,
    }


def mean_of_judged(items):
    values = [v for v in items if v is not None]
    return sum(values) / len(values) if values else float("nan")


def share_true(items):
    return sum(bool(v) for v in items) / len(items) if items else float("nan")
'''

STAND_IN_SCORE_METRICS = ("gveval_mean", "gveval_accuracy", "gveval_completeness", "gveval_conciseness", "gveval_relevance")
STAND_IN_FAILURE_METRIC = "gveval_failed"


def write_stand_in_judged_task(folder: Path, docs: Sequence[Mapping[str, Any]], task: str = "stand_in_gveval") -> Path:
    """Write a judged caption task (YAML, utils.py, docs.jsonl) into `folder` (pass it as `include_path`).
    Documents are plain JSON objects; the task declares `video_id` as its id field."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    docs_path = folder / f"{task}_docs.jsonl"
    docs_path.write_text("".join(json.dumps(dict(doc)) + "\n" for doc in docs), encoding="utf-8")
    (folder / "utils.py").write_text(_STAND_IN_UTILS, encoding="utf-8")
    metric_list = "".join(
        f"  - metric: {metric}\n    aggregation: !function utils.mean_of_judged\n    higher_is_better: true\n"
        for metric in STAND_IN_SCORE_METRICS
    )
    metric_list += f"  - metric: {STAND_IN_FAILURE_METRIC}\n    aggregation: !function utils.share_true\n    higher_is_better: false\n"
    (folder / f"{task}.yaml").write_text(
        f"task: {task}\n"
        "dataset_path: json\n"
        "dataset_kwargs:\n"
        "  data_files:\n"
        f"    test: {json.dumps(str(docs_path))}\n"
        "test_split: test\n"
        "output_type: generate_until\n"
        "doc_to_visual: !function utils.doc_to_visual\n"
        "doc_to_text: \"Describe the video in one sentence.\"\n"
        "doc_to_target: video_id\n"
        "process_results: !function utils.process_results\n"
        f"metric_list:\n{metric_list}"
        "metadata:\n"
        "  version: 0.1\n"
        "  id_field: video_id\n",
        encoding="utf-8",
    )
    return folder


def judge_synthetic_msvd(folder: Path, judge_base_url: str, *, n_items: int, samples: int,
                         caption_prefix: str = "", annotators: int = 2) -> Path:
    """`capjudge judge` (text scoring, k = `samples` replies) on a made-up MSVD-Eval file of `n_items` items
    with `annotators` ratings each; returns the output folder. For tests whose judge server scripts the
    replies' statistics (noise, item effects) and that read them back from the run."""
    folder.mkdir(parents=True, exist_ok=True)
    references = ["a person does thing {i}", "someone acts {i}"][:annotators]
    data = {f"item{i:03d}": {"vname": f"clip{i}.avi", "ref": [ref.format(i=i) for ref in references],
                             "candidate": "unused", "human_score": [[3 + a, 3 + a, 3 + a, 3 + a, 3.0 + a] for a in range(annotators)]}
            for i in range(n_items)}
    (folder / "msvd.json").write_text(json.dumps(data))
    captions = folder / "captions.jsonl"
    captions.write_text("".join(json.dumps({"id": f"item{i:03d}", "caption": f"{caption_prefix}caption for item {i}"}) + "\n"
                                for i in range(n_items)))
    env = {"OPENAI_BASE_URL": judge_base_url, "OPENAI_API_KEY": TEST_API_KEY, "MODEL_VERSION": TEST_JUDGE_MODEL,
           "CAPJUDGE_CACHE": str(folder / "cache.sqlite"), "CAPJUDGE_MSVD_EVAL_JSON": str(folder / "msvd.json"),
           "CAPJUDGE_JUDGE_SAMPLES": str(samples), "CAPJUDGE_GVEVAL_SCORING": "text", "HF_DATASETS_OFFLINE": "1",
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(folder / "hf"), "PATH": "/usr/bin:/bin", "HOME": str(folder)}
    out = folder / "out"
    result = run_capjudge_cli(["judge", "--captions", str(captions), "--task", "gveval_references", "--out", str(out)],
                              env=env, cwd=REPO_ROOT, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return out
