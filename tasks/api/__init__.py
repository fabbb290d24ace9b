"""capjudge's public Python API: judge captions, read runs, correlate with humans, rank models, measure what fools
a judge, from a notebook or a script::

    from capjudge.api import JudgeConfig, judge_captions, load_runs, build_leaderboard, correlate

The names in `__all__` are the public API; every other module and name of capjudge is private and may move.
A public name is removed or changed incompatibly only after one minor release in which it still works and emits
a DeprecationWarning naming its replacement (README, "Python API").

Each name is a thin front on the path the `capjudge` commands and the lmms-eval tasks take (no second
implementation), or the project's own type re-exported. Importing this module reads no environment and loads
no lmms-eval: the judge configuration is read when a judging function is called without one, as in a run.
"""

from capjudge.api.analysis import load_runs
from capjudge.api.errors import ItemError, JudgeInputError, UnknownJudgeError
from capjudge.api.judges import judge_names
from capjudge.api.judging import judge_caption, judge_captions
from capjudge.api.sensitivity import run_sensitivity
from capjudge.judges.anycap.judge import AnyCapResult
from capjudge.judges.client.config import ConfigError, JudgeConfig
from capjudge.judges.gveval.parser import GVEvalResult
from capjudge.judges.types import JudgeResult
from capjudge.metrics.files.run_file_error import RunFileError
from capjudge.metrics.files.runs import Run
from capjudge.metrics.files.task_run import TaskRun
from capjudge.metrics.leaderboard.board import build_leaderboard
from capjudge.metrics.leaderboard.render import LeaderboardFiles, write_leaderboard
from capjudge.metrics.leaderboard.render import render_markdown as leaderboard_markdown
from capjudge.metrics.leaderboard.stats import LeaderboardSettings
from capjudge.metrics.leaderboard.table import Leaderboard
from capjudge.metrics.sensitivity.report import SensitivityReport
from capjudge.metrics.sensitivity.report import markdown as sensitivity_table
from capjudge.metrics.statistics.correlation import BootstrapSettings, Coefficient, CorrelationResult, correlate
from capjudge.tasks.harness.item_judgment import ItemJudgment

__all__ = [
    # Judging: a named judge, one item or a list, the client, cache and rate budget as configured.
    "judge_caption",
    "judge_captions",
    "judge_names",
    "JudgeConfig",
    "ItemJudgment",
    "JudgeResult",
    "GVEvalResult",
    "AnyCapResult",
    "JudgeInputError",
    "UnknownJudgeError",
    "ItemError",
    "ConfigError",
    # Runs and leaderboards.
    "load_runs",
    "Run",
    "TaskRun",
    "RunFileError",
    "build_leaderboard",
    "LeaderboardSettings",
    "Leaderboard",
    "write_leaderboard",
    "LeaderboardFiles",
    "leaderboard_markdown",
    # Judge-human correlation.
    "correlate",
    "BootstrapSettings",
    "CorrelationResult",
    "Coefficient",
    # What fools a judge.
    "run_sensitivity",
    "SensitivityReport",
    "sensitivity_table",
]
