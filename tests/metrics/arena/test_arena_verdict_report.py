"""The arena report of a verdict file (issue #49 items 3 and 6's statistics; capjudge.metrics.arena.verdict_*),
through the real CLI and the test server with the scripted pairwise judges of known behaviour
(tests/support/scripted_pairwise_judges.py), each judged once per module and read by every test:

- always-first: position consistency 0, preference fairness -1 (the first-position extreme), every verdict
  flipped, every pair a position-inconsistent tie, so every model at 1000;
- fair: consistency 1, fairness 0, no flip, and the Bradley-Terry ranking equal to a logistic regression
  fitted here on the same battles (numpy, Newton's method);
- length-loving: its raw ranking puts the shorter-writing fair set below poor; the length-controlled ranking
  takes that preference away.
Each figure is checked against a count made here from the records, not through capjudge's statistics.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from capjudge.judges.pairwise.record import read_arena_file
from capjudge.metrics.arena.bradley_terry import RIDGE
from capjudge.metrics.statistics.small_samples import ZERO_WIDTH_REASON

from tests.support.arena_runs import arena, caption_flags
from tests.support.harness_runs import judge_server
from tests.support.scripted_pairwise_judges import GVEVAL_DIMENSIONS, PairwiseWorld

pytestmark = pytest.mark.slow
TASK = "gveval_demo"
MODELS = ("captions_good", "captions_fair", "captions_poor")


class Judged:
    """One scripted judge's arena over the demo's three caption sets: the run, its rerun, the files."""

    def __init__(self, root, world, judge: str) -> None:
        self.out = root / "out"
        with judge_server(responder=world.respond) as server:
            self.done = arena(root, server, judge, "--task", TASK, *caption_flags(), "--out", str(self.out))
            self.requests = len(server.log)
            server.log.clear()
            self.again = arena(root, server, judge, "--task", TASK, *caption_flags(), "--out", str(self.out),
                               "--format", "json")
            self.rerun_requests = len(server.log)
        assert self.done.returncode == 0, self.done.stderr[-3000:]
        assert self.again.returncode == 0, self.again.stderr[-3000:]
        self.verdicts = self.out / f"arena_{TASK}.jsonl"
        self.header, self.records = read_arena_file(self.verdicts)
        self.report = json.loads((self.out / f"arena_{TASK}.json").read_text(encoding="utf-8"))
        self.markdown = (self.out / f"arena_{TASK}.md").read_text(encoding="utf-8")
        self.member = self.report["judges"][0]


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    world, made = PairwiseWorld(), {}

    def judged_by(judge: str) -> Judged:
        if judge not in made:
            made[judge] = Judged(tmp_path_factory.mktemp(judge), world, judge)
        return made[judge]

    return judged_by


def _counted(records, dimension="overall"):
    """Consistent, primacy, recency, flipped, counted from the records by position (b_first swapped back)."""
    swap = {"A": "B", "B": "A", "tie": "tie"}
    positions = [(r.a_first.verdicts[dimension], swap[r.b_first.verdicts[dimension]]) for r in records
                 if r.a_first.ok and r.b_first.ok]
    consistent = sum(p in {("A", "B"), ("B", "A"), ("tie", "tie")} for p in positions)
    primacy = sum(p in {("A", "A"), ("A", "tie"), ("tie", "A")} for p in positions)
    recency = sum(p in {("B", "B"), ("B", "tie"), ("tie", "B")} for p in positions)
    flipped = sum(p in {("A", "A"), ("B", "B")} for p in positions)
    return len(positions), consistent, primacy, recency, flipped


def _ridge_logistic_elo(records) -> dict[str, float]:
    """The battles one by one (a consistent pair won as both orders say, a tie half a win each way; an
    inconsistent pair a tie), fitted by a logistic regression with scikit-learn's C = 1e6 penalty (what
    keeps a model that wins every battle finite), by damped Newton here; Elo = 1000 + 400/ln10 (theta - mean)."""
    rows, ys, ws = [], [], []
    for r in records:
        x = np.zeros(len(MODELS))
        x[MODELS.index(r.model_a)], x[MODELS.index(r.model_b)] = 1.0, -1.0
        a, b = r.a_first.verdicts["overall"], r.b_first.verdicts["overall"]
        outcome = (1.0 if a == "A" else 0.0) if a == b and a != "tie" else 0.5
        for y, w in ((1.0, outcome), (0.0, 1.0 - outcome)):
            if w:
                rows.append(x), ys.append(y), ws.append(w)
    x, y, w = np.array(rows), np.array(ys), np.array(ws)

    def loss(theta):
        z = x @ theta
        return float(np.sum(w * np.logaddexp(0, -z) * y + w * np.logaddexp(0, z) * (1 - y)) + 0.5 * RIDGE * theta @ theta)

    theta = np.zeros(len(MODELS))
    for _ in range(500):
        p = 1 / (1 + np.exp(-(x @ theta)))
        gradient = -x.T @ (w * (y - p)) + RIDGE * theta
        step = np.linalg.solve((x.T * (w * p * (1 - p))) @ x + RIDGE * np.eye(len(MODELS)), gradient)
        scale = 1.0
        while loss(theta - scale * step) > loss(theta) and scale > 1e-8:
            scale /= 2
        theta = theta - scale * step
        if np.abs(gradient).max() < 1e-12:
            break
    elo = 1000 + 400 / math.log(10) * (theta - theta.mean())
    return dict(zip(MODELS, elo))


def test_an_always_first_judge_is_named_at_the_first_position_extreme(judged):
    run = judged("first")
    assert run.requests == 60 and run.rerun_requests == 0  # the rerun asks nothing and reports the same
    n, consistent, primacy, recency, flipped = _counted(run.records)
    assert (n, consistent, primacy, recency, flipped) == (30, 0, 30, 0, 30)
    for dimension in ("overall", *GVEVAL_DIMENSIONS[:-1]):
        bias = run.member["position_bias"][dimension]
        # Every resample gives the same shares: zero-width intervals, so the values alone and the reason (the
        # small-sample rule, issue #60 item 3: '1.00 [1.00, 1.00]' read as "its CI excludes 0").
        assert bias["position_consistency"] == {"value": 0.0, "ci_low": None, "ci_high": None}
        assert bias["preference_fairness"] == {"value": -1.0, "ci_low": None, "ci_high": None}
        assert bias["order_flipped_share"] == {"value": 1.0, "ci_low": None, "ci_high": None}
        assert bias["no_interval"] == dict.fromkeys(("consistency", "fairness", "flipped"), ZERO_WIDTH_REASON)
        assert (bias["pairs"], bias["primacy_preferred"], bias["order_flipped"]) == (30, 30, 30)
    ranking = run.member["ranking"]["overall"]
    # Every verdict flipped: every pair a position-inconsistent tie, said, and no model ahead of another.
    assert (ranking["battles"], ranking["ties"], ranking["position_inconsistent_ties"], ranking["order_flipped"]) \
        == (30, 30, 30, 30)
    assert all(abs(e["value"] - 1000.0) < 1e-6 for e in ranking["elo"].values())
    assert "| overall | 30 | 0 | 0.00 | -1.00 | 1.00 | 30 |" in run.done.stdout
    assert f"No interval for overall position consistency: {ZERO_WIDTH_REASON}." in run.done.stdout
    # The summary's row is still the last row that starts with the judge's name (the report's rows do not).
    assert [line for line in run.done.stdout.splitlines() if line.startswith("| judge | ")][-1] == \
        "| judge | 30 | 30 | 30 | 0 | 60 | 0 |"
    assert "30 position-inconsistent pairs counted as ties (30 of them flipped the winner)" in run.markdown
    # --format json prints the same report as the file, under "report", beside the summary.
    printed = json.loads(run.again.stdout)
    assert printed["report"] == run.report and printed["judges"][0]["requests"] == 0
    assert run.markdown.splitlines()[0] == f"<!-- capjudge arena report, run {run.header.stamp} -->"
    assert (run.out / f"arena_{TASK}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_fair_judge_is_consistent_and_its_ranking_is_an_independent_logistic_fit(judged):
    run = judged("fair")
    assert _counted(run.records) == (30, 30, 0, 0, 0)
    bias = run.member["position_bias"]["overall"]
    assert bias["position_consistency"] == {"value": 1.0, "ci_low": None, "ci_high": None}  # zero width: value alone
    assert bias["preference_fairness"] == {"value": 0.0, "ci_low": None, "ci_high": None}
    assert bias["no_interval"]["consistency"] == bias["no_interval"]["fairness"] == ZERO_WIDTH_REASON
    assert bias["order_flipped_share"]["value"] == 0.0
    ranking = run.member["ranking"]["overall"]
    assert ranking["ranking"] == list(MODELS) and ranking["position_inconsistent_ties"] == 0
    expected = _ridge_logistic_elo(run.records)
    for model in MODELS:
        assert ranking["elo"][model]["value"] == pytest.approx(expected[model], abs=0.5)
    # The fair judge prefers good to every other and every other to poor, every time: their maximum-likelihood
    # ratings are infinite, their finite values the regularisation's, so they get no interval (a zero-width
    # bracket would read as certainty); the model between them has its bootstrap interval.
    assert ranking["no_interval"] == {
        "captions_good": "won every one of its battles: its rating is set by the fit's regularisation, not the battles",
        "captions_poor": "lost every one of its battles: its rating is set by the fit's regularisation, not the battles",
        # between them, fair is at the mean in every resample: a zero-width interval, no interval either
        "captions_fair": "every resample gives it the same rating (a zero-width interval measures nothing)"}
    assert all((ranking["elo"][m]["ci_low"], ranking["elo"][m]["ci_high"]) == (None, None) for m in MODELS)
    assert "No interval for captions\\_good: won every one of its battles" in run.markdown
    # The scripted judge says the same on every dimension: every dimension's ranking is the overall one.
    assert all(run.member["ranking"][d]["elo"] == ranking["elo"] for d in GVEVAL_DIMENSIONS[:-1])


def test_the_length_controlled_ranking_takes_away_a_length_loving_judges_preference(judged):
    run, fair = judged("long"), judged("fair")
    assert _counted(run.records)[1:] == (30, 0, 0, 0)  # consistent: its bias is for length, not position
    raw = run.member["ranking"]["overall"]
    controlled = run.member["length_controlled"]
    fair_ranking = fair.member["ranking"]["overall"]["ranking"]
    # Raw: the length-lover ranks poor (longer captions) above fair, unlike the fair judge.
    assert raw["ranking"] != fair_ranking and raw["ranking"][0] == "captions_good"
    assert raw["elo"]["captions_poor"]["value"] - raw["elo"]["captions_fair"]["value"] > 50
    # Length held equal: good still first, and the preference for poor's length is gone (on the demo every
    # verdict of this judge is its length, so fair and poor end tied: nothing else tells them apart).
    assert controlled["ranking"][0] == "captions_good"
    assert abs(controlled["elo"]["captions_poor"]["value"] - controlled["elo"]["captions_fair"]["value"]) < 1.0
    gamma = controlled["gamma_elo_per_rms_length_difference"]
    assert gamma["value"] > 0 and gamma["ci_low"] > 0  # the longer caption wins, and the fit says so


def _one_line(done, prefix="capjudge report: "):
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(prefix), lines
    return lines[0]


def _report(root, *args, judge_env=None):
    """`capjudge report ARGS` with no judge configured (no key, no endpoint, no model), or with `judge_env`."""
    from tests.support.harness_runs import run_capjudge_cli
    from tests.support.paths import REPO_ROOT

    env = judge_env or {"PATH": "/usr/bin:/bin", "HOME": str(root), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return run_capjudge_cli(["report", *map(str, args)], env=env, cwd=REPO_ROOT)


def test_report_arena_recomputes_the_same_report_from_the_file_with_or_without_a_judge(judged, tmp_path):
    from tests.support.scripted_caption_judges import judge_env

    run = judged("first")
    alone = _report(tmp_path, "--arena", run.verdicts, "--out", tmp_path / "alone")
    assert alone.returncode == 0, alone.stderr[-3000:]
    for suffix in (".md", ".json", ".html"):
        assert (tmp_path / "alone" / f"arena_{TASK}{suffix}").read_bytes() == \
               (run.out / f"arena_{TASK}{suffix}").read_bytes(), suffix
    assert "30 battles x 1 judge, 30 position-inconsistent" in alone.stdout
    assert "| overall | 30 | 0 | 0.00 | -1.00 | 1.00 |" in alone.stdout
    # With a judge configured (the test server's, a key, a model): still nothing is asked of it.
    with judge_server() as server:
        configured = _report(tmp_path, "--arena", run.verdicts, "--out", tmp_path / "configured",
                             judge_env=judge_env(tmp_path, server, "first"))
        assert configured.returncode == 0, configured.stderr[-3000:]
        assert server.log == []
    assert (tmp_path / "configured" / f"arena_{TASK}.json").read_bytes() == (run.out / f"arena_{TASK}.json").read_bytes()
    # A rerun replaces its own files; into the verdict file's own folder it replaces capjudge arena's (same run).
    assert _report(tmp_path, "--arena", run.verdicts, "--out", tmp_path / "alone").returncode == 0
    assert _report(tmp_path, "--arena", run.verdicts, "--out", run.out).returncode == 0


def _rewritten(source, target, edit_body=None, edit_header=None):
    """The verdict file with its record lines edited, the header's records hash made to match again (so that
    what is refused is the edit itself, not the hash)."""
    import hashlib

    first, _, body = source.read_text(encoding="utf-8").partition("\n")
    body = edit_body(body) if edit_body else body
    header = json.loads(first)
    header["records_sha256"] = hashlib.sha256(body.encode("utf-8")).hexdigest()
    line = json.dumps(header)
    target.write_text((edit_header(line) if edit_header else line) + "\n" + body, encoding="utf-8")
    return target


def test_hostile_verdict_files_are_one_line_and_exit_2(judged, tmp_path):
    run = judged("first")
    text = run.verdicts.read_text(encoding="utf-8")
    edited = tmp_path / "edited.jsonl"
    edited.write_text(text.replace('"overall": "A"', '"overall": "B"', 1), encoding="utf-8")
    line = _one_line(_report(tmp_path, "--arena", edited, "--out", tmp_path / "o1"))
    assert "edited.jsonl: its records do not match the hash in its header" in line
    duplicated = _rewritten(run.verdicts, tmp_path / "duplicated.jsonl",
                            edit_body=lambda body: body.replace('"judge": "gveval"', '"judge": "gveval", "judge": "anycap"', 1))
    line = _one_line(_report(tmp_path, "--arena", duplicated, "--out", tmp_path / "o2"))
    assert "duplicated.jsonl, line 2: not an arena record" in line and "judge" in line
    header_twice = _rewritten(run.verdicts, tmp_path / "header_twice.jsonl",
                              edit_header=lambda line: line.replace('"task": ', '"task": "anycap_style_demo", "task": ', 1))
    line = _one_line(_report(tmp_path, "--arena", header_twice, "--out", tmp_path / "o3"))
    assert "header_twice.jsonl: line 1 is not a capjudge arena header" in line
    for name in ("o1", "o2", "o3"):  # nothing written for a refused file
        assert not list((tmp_path / name).glob("*")) if (tmp_path / name).exists() else True


def test_report_arena_refuses_taken_names_and_other_inputs_in_one_line(judged, tmp_path):
    run = judged("first")
    out = tmp_path / "out"
    (out / f"arena_{TASK}.md").mkdir(parents=True)
    assert "is a folder" in _one_line(_report(tmp_path, "--arena", run.verdicts, "--out", out))
    assert not (out / f"arena_{TASK}.json").exists()  # checked before anything is written
    # The report of another run (the fair judge's) under these names is never replaced.
    other = tmp_path / "other"
    other.mkdir()
    (other / f"arena_{TASK}.json").write_bytes((judged("fair").out / f"arena_{TASK}.json").read_bytes())
    line = _one_line(_report(tmp_path, "--arena", run.verdicts, "--out", other))
    assert "already holds the report of another arena run" in line
    # A verdict file named .json would be replaced by its own report.
    named = tmp_path / "named"
    named.mkdir()
    (named / "verdicts.json").write_bytes(run.verdicts.read_bytes())
    assert "would replace the file itself" in _one_line(_report(tmp_path, "--arena", named / "verdicts.json", "--out", named))
    assert "not with RUNs or --sensitivity" in _one_line(_report(tmp_path, "some_run", "--arena", run.verdicts, "--out", out))
    assert "another command's" in _one_line(_report(tmp_path, "--arena", tmp_path / "leaderboard.jsonl", "--out", out))


def test_another_tasks_report_under_the_arena_s_names_is_refused_before_any_request(judged, tmp_path):
    """`capjudge arena --task anycap_style_demo` into a folder where arena_anycap_style_demo.md holds the G-VEval run's
    report (a file of another task): one line, exit 2, nothing asked."""
    from tests.support.arena_runs import one_line_refusal

    run = judged("first")
    out = tmp_path / "out"
    out.mkdir()
    (out / "arena_anycap_style_demo.md").write_bytes((run.out / f"arena_{TASK}.md").read_bytes())
    with judge_server(responder=PairwiseWorld().respond) as server:
        done = arena(tmp_path, server, "first", "--task", "anycap_style_demo", *caption_flags(), "--limit", "1",
                     "--out", str(out))
        assert server.log == []
    line = one_line_refusal(done)
    assert "arena_anycap_style_demo.md: already holds the report of another arena run" in line
    assert not (out / "arena_anycap_style_demo.jsonl").exists()
