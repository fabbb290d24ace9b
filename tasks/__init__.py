"""capjudge.tasks: lmms-eval task folders (YAML + thin glue) and the captions_file model."""

from pathlib import Path

# The folder lmms-eval's --include_path takes: the task YAMLs sit in its subfolders.
TASKS_DIR = Path(__file__).resolve().parent
