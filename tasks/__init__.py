"""capjudge.tasks: lmms-eval task folders (YAML + thin glue), the judging stage and the `capjudge` command."""

from importlib.metadata import version
from pathlib import Path

# The folder lmms-eval's --include_path takes: the task YAMLs sit in its subfolders (`capjudge tasks-folder`
# prints it; LMMS_EVAL_PLUGINS=capjudge makes lmms-eval find it itself).
TASKS_DIR = Path(__file__).resolve().parent


def capjudge_version() -> str:
    """The installed capjudge's version (its distribution metadata), as results files and judge records name it."""
    return version("capjudge")
