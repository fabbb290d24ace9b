"""The command line at the top: one module per command in tasks/cli/, all imported statically by main.py.

Checked: every module under tasks/cli/ that registers commands is in COMMAND_MODULES (a forgotten one would
silently not exist), no module outside tasks/cli/ registers commands (no CLI in a lower layer), every
command's handler lives in its tasks/cli/ module, `capjudge --help` lists every command, and a command module
that cannot import makes every `capjudge` call fail with a traceback naming it (never a command that silently
vanishes, as the old importlib loop let happen).
"""

from __future__ import annotations

import argparse
import ast
import os
import re
from pathlib import Path

import pytest

from capjudge.tasks.cli.main import COMMAND_MODULES, build_parser
from tests.support.harness_runs import run_capjudge
from tests.support.paths import REPO_ROOT

CLI_FOLDER = REPO_ROOT / "tasks" / "cli"
# The commands capjudge has today; a module dropped from COMMAND_MODULES takes its commands out of this set.
KNOWN_COMMANDS = {
    "render", "parse", "length-rule", "correlate", "leaderboard", "report", "reliability", "agreement",
    "serve-local", "demo", "judge", "cache", "estimate", "sensitivity",
}


def _defines_register(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, ast.FunctionDef) and node.name == "register" for node in tree.body)


def _registers_commands(path: Path) -> bool:
    """A module-level `register` function, or any call that adds a subcommand (`add_parser` / `add_subparsers`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    calls = (node.func.attr for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute))
    return _defines_register(path) or any(name in ("add_parser", "add_subparsers") for name in calls)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return {name: sub for action in actions for name, sub in action.choices.items()}


def _handlers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], str]:
    """Command path (e.g. ("cache", "merge")) -> the module of the function that runs it, for every leaf."""
    found = {}
    for name, sub in _subcommands(parser).items():
        if _subcommands(sub):
            found.update(_handlers(sub, (*path, name)))
        else:
            found[(*path, name)] = sub.get_default("func").__module__
    return found


def test_every_command_module_under_tasks_cli_is_assembled_and_only_those():
    listed = [module.__name__ for module in COMMAND_MODULES]
    assert len(listed) == len(set(listed)), "a module appears twice in COMMAND_MODULES"
    on_disk = {f"capjudge.tasks.cli.{path.stem}" for path in CLI_FOLDER.glob("*.py") if _defines_register(path)}
    assert sorted(on_disk - set(listed)) == [], "tasks/cli modules with register() missing from COMMAND_MODULES"
    assert sorted(set(listed) - on_disk) == [], "COMMAND_MODULES names modules that are not tasks/cli command modules"


def test_no_module_outside_tasks_cli_registers_commands():
    outside = [
        str(path.relative_to(REPO_ROOT))
        for top in ("judges", "metrics", "tasks")
        for path in sorted((REPO_ROOT / top).rglob("*.py"))
        if CLI_FOLDER not in path.parents and "__pycache__" not in path.parts and _registers_commands(path)
    ]
    assert outside == []


def test_every_command_runs_a_handler_of_its_own_command_module():
    handlers = _handlers(build_parser())
    assert all(module.startswith("capjudge.tasks.cli.") for module in handlers.values()), handlers
    # Every command module contributes at least one command: none is listed without doing anything.
    assert set(handlers.values()) == {module.__name__ for module in COMMAND_MODULES}


@pytest.mark.parametrize("group", [(), ("render",), ("parse",)], ids=["top", "render", "parse"])
def test_help_lists_every_command(group):
    parser = build_parser()
    for name in group:
        parser = _subcommands(parser)[name]
    names = set(_subcommands(parser))
    if not group:
        assert KNOWN_COMMANDS <= names
    result = run_capjudge(*group, "--help", env={"COLUMNS": "100"})
    assert result.returncode == 0, result.stderr
    unlisted = [name for name in sorted(names) if not re.search(rf"^    {re.escape(name)}(\s|$)", result.stdout, re.MULTILINE)]
    assert unlisted == [], result.stdout


# Installed first on sys.meta_path by a sitecustomize on PYTHONPATH: importing the named module raises.
BLOCKER = """\
import importlib.abc
import sys

BLOCKED = {blocked!r}


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == BLOCKED:
            raise ImportError(f"{{name}}: blocked by tests/tasks/cli/test_cli_layout.py")
        return None


sys.meta_path.insert(0, Blocker())
"""


@pytest.mark.parametrize("blocked", [module.__name__ for module in COMMAND_MODULES])
def test_a_command_module_that_cannot_import_fails_every_capjudge_call_loudly(tmp_path, blocked):
    (tmp_path / "sitecustomize.py").write_text(BLOCKER.format(blocked=blocked), encoding="utf-8")
    result = run_capjudge("--help", env={"PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))},
                          warm=False)  # sitecustomize acts at interpreter start-up
    assert result.returncode != 0, "capjudge ran without one of its command modules"
    assert "Traceback (most recent call last)" in result.stderr
    assert f"ImportError: {blocked}: blocked by tests/tasks/cli/test_cli_layout.py" in result.stderr
    assert "usage:" not in result.stdout  # no help without the command
