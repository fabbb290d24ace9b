"""Shared fixtures: the OpenAI-compatible test server and a judge client pointed at it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import warm_launch
from tests.support.once_per_run import run_folder
from tests.support.openai_server import OpenAITestServer

# The suite keeps more processes busy than the machine has cores (`make test`: four workers and test-min beside
# them on two), and an OpenMP thread that waits at a barrier spins by default (libgomp: ~300,000 turns before
# it sleeps) on a core its peer needs. llama.cpp's prompt evaluation (the embedded judge) waits at one per layer:
# with a second process busy, its 2 threads took ~6.3 CPU-s for 600 prompt tokens spinning, ~4.1 sleeping, the
# same logits bit for bit either way. Set here, before the workers start, for every process the tests start
# (a value already set is kept); it is how threads wait, never what they compute.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The files whose tests take longest (real-model demos, wheels, lmms-eval runs, Java baselines), longest
# first. They run before the rest: pytest-xdist's worksteal scheduler hands each worker a contiguous half of
# the collection and an idle worker steals from the end of another's queue, so with the long tests at the
# front the run ends on short tests on both workers instead of one worker finishing a 100 s test alone.
# Order only: a file missing here runs as before, and a stale list costs time, never a result.
LONGEST_FIRST = (
    "test_installed_package.py", "test_demo_pipeline.py", "test_multi_process.py", "test_judge_panel.py",
    "test_budget.py", "test_learned_charge.py", "test_leaderboard_length.py", "test_judge_stage.py", "test_vatex_baselines.py", "test_correlate_cli.py",
    "test_gveval_task.py", "test_vatex_cli.py", "test_warm_launch.py", "test_judge_noise.py",
    "test_reliability_interrupted.py", "test_leaderboard_noise.py", "test_local_server.py", "test_item_report.py",
    "test_reliability_faults.py", "test_leaderboard_panel.py", "test_batch_stage.py", "test_correlation_plots.py",
    "test_prejudge.py", "test_item_report_panel.py", "test_sensitivity_cli.py", "test_batch_panel.py",
    "test_hostile_sensitivity.py",
)


# Files whose tests share one session-wide fixture across workers (a file lock, see test_installed_package.py's
# `installed`): their tests are dealt out to the heads of the workers' first shares, so that its several
# minutes-long tests (the README's installed-user examples) run side by side, not one after another on the
# worker whose share they fall in (worksteal takes work only from the tail of a share).
SPREAD_ACROSS_WORKERS = ("test_installed_package.py",)
# While the first worker builds that venv (90 CPU-s, mostly one core of pip: 100-160 s under the suite's load),
# the others would only wait at its lock, a core left idle. Each later worker starts with one group of these
# CPU-bound files instead (~150-190 s of the suite's wall time each: the embedded judge's demo, lmms-eval
# processes, panels, the local server, the noise simulations), then its installed-user test, whose venv is
# ready by then. One file per worker was too little: the two installed-user tests waited 35-80 s for the venv.
BEFORE_THE_WAIT = (
    ("test_demo_pipeline.py", "test_judge_panel.py", "test_leaderboard_length.py"),
    ("test_multi_process.py", "test_local_server.py", "test_judge_noise.py", "test_leaderboard_noise.py"),
)
# Files whose tests mostly wait on the clock (real rate-limit windows and header pauses: ~290 s of the suite's
# wall time for ~15 CPU-s). Where they fall in a CPU-bound worker's share, that worker idles a core while they
# wait. Given a worker beyond the ones above (TEST_WORKERS=4), it starts with them, beside three CPU-bound ones.
WAITING_ON_THE_CLOCK = ("test_learned_charge.py", "test_budget.py", "test_hostile_header_pauses.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: position for position, name in enumerate(LONGEST_FIRST)}
    position = {id(item): index for index, item in enumerate(items)}
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), position[id(item)]))
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        items[:] = _spread(items, workers)


def _spread(items: list, workers: int) -> list:
    """`items` reordered for worksteal's first shares (the pending tests split evenly, in order): worker 0 starts
    with its turn of the SPREAD_ACROSS_WORKERS tests (it builds their venv), each later worker with a
    BEFORE_THE_WAIT group and then its turn of them; with a worker to spare beyond those, the last one starts with
    the WAITING_ON_THE_CLOCK files. Longest-first order is kept otherwise."""
    spread = [item for item in items if item.path.name in SPREAD_ACROSS_WORKERS]
    leads = [[item for name in group for item in items if item.path.name == name] for group in BEFORE_THE_WAIT]
    leads = [lead for lead in leads if lead]
    # Only the builder and the workers with a lead group take installed-user tests: another would wait at the lock.
    sharing = min(workers, 1 + len(leads))
    waiting = [item for item in items if item.path.name in WAITING_ON_THE_CLOCK] if workers > sharing else []
    heads = [[], *leads[:sharing - 1]] + [[] for _ in range(workers - sharing)]
    if waiting:
        heads[-1] = waiting
    taken = {id(item) for head in heads for item in head}
    rest = [item for item in items if item.path.name not in SPREAD_ACROSS_WORKERS and id(item) not in taken]
    ordered: list = []
    remaining = len(items)
    for worker in range(workers):
        share = remaining // (workers - worker)
        mine = heads[worker] + (spread[worker::sharing] if worker < sharing else [])
        ordered += mine + rest[:max(0, share - len(mine))]
        rest = rest[max(0, share - len(mine)):]
        remaining -= share
    return ordered + rest


@pytest.fixture(scope="session", autouse=True)
def _warm_launch_scratch(tmp_path_factory, worker_id):
    """Warm launches (tests/support/warm_launch.py) keep their server's datasets cache and their output files here;
    the run's servers share what they would all build alike through the run's own folder."""
    warm_launch.use_scratch(tmp_path_factory.mktemp("warm_launch"), shared=run_folder(tmp_path_factory, worker_id))


@pytest.fixture(scope="session")
def run_baseline_cache(tmp_path_factory, worker_id):
    """One classic-baseline cache folder for this test run, shared by every xdist worker of it (the folder
    above each worker's own temporary root), so the ~20 s pycocoevalcap computation of one content runs once
    per run wherever it is needed (the cache's lock file makes the other workers wait for it and read it).
    Never the user's ~/.cache: a test must not read what an earlier run or the user left there."""
    folder = run_folder(tmp_path_factory, worker_id) / "baseline_cache"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def _running_server():
    with OpenAITestServer() as running:  # one server for the session: stopping one takes half a second
        yield running


@pytest.fixture
def server(_running_server):
    """The test server, with no requests, scripts or latency left over from earlier tests."""
    return _running_server.reset()


@pytest.fixture
def make_client(tmp_path):
    """Build a JudgeClient against a server; no real sleeping between retries (delays are recorded)."""
    from capjudge.judges.client.judge_client import JudgeClient
    from capjudge.judges.client.config import JudgeConfig

    made = []

    def build(server, *, sleeps=None, **overrides):
        settings = dict(
            base_url=server.base_url, api_key="sk-test-key", model="test-judge",
            cache_path=tmp_path / "cache.sqlite", timeout=5.0, max_attempts=4,
        )
        settings.update(overrides)
        record = sleeps.append if sleeps is not None else (lambda seconds: None)
        client = JudgeClient(JudgeConfig(**settings), sleep=record)
        made.append(client)
        return client

    yield build
    for client in made:
        client.close()


@pytest.fixture(scope="module")
def _chromium():
    """One headless Chromium per test module (tests/support/browser.py); a missing browser fails the test, never skips
    it. Not one per session: Playwright's sync API keeps an event loop running in the main thread while it is
    open, and tests of other modules that start their own (`asyncio.run`) must not find one there."""
    from tests.support.browser import Browser, BrowserMissing

    try:
        running = Browser()
    except BrowserMissing as missing:
        pytest.fail(f"browser test cannot run: {missing}", pytrace=False)
    yield running
    running.close()


@pytest.fixture
def open_page(_chromium, tmp_path):
    """`open_page(path, fragment="") -> PageVisit` in the real browser; each page opened is screenshotted into
    tmp_path at the end."""
    visits = []

    def open_(path: Path, fragment: str = ""):
        visit = _chromium.open(Path(path), fragment)
        visits.append(visit)
        return visit

    yield open_
    for number, visit in enumerate(visits):
        try:
            visit.screenshot(tmp_path / f"screenshot-{number}-{visit.path.stem}.png")
        finally:
            visit.page.close()

