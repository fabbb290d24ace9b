"""The house plan, checked: the README's layout names every module there is, pyproject installs every
sub-package, imports only go down the layers (tasks -> metrics -> judges; inside tasks: cli -> runs -> harness
and models -> the tasks package's own modules) with no cycle anywhere (type-only imports included), and no
module grows past MAX_MODULE_LINES.

These are static checks (files and ASTs), so a module that moves, appears or starts importing upward fails
here, with its name, before a reader of the README or a wheel user finds out.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TOP_FOLDERS = {"judges": "capjudge.judges", "metrics": "capjudge.metrics", "tasks": "capjudge.tasks"}
# Folders installed as a package of their own name rather than under their top folder's: lmms-eval's plugin
# convention (LMMS_EVAL_PLUGINS=capjudge) imports `capjudge.models`, so tasks/models is that package.
# tasks/api is capjudge.api, the public Python API (README "Python API"): one namespace a notebook imports.
RENAMED_FOLDERS = {"tasks/models": "capjudge.models", "tasks/api": "capjudge.api"}
LAYER = {"judges": 0, "metrics": 1, "tasks": 2}
# The floors of the installed package, bottom to top (issue #48 item 1): a module imports only modules of a
# lower floor, or of its own unit. A unit is the longest of these prefixes that names the module; two units on
# one floor (the lmms-eval glue and the lmms-eval model) may not import each other. `capjudge.tasks` itself
# (TASKS_DIR, the version, how a run inside lmms-eval ends: run_outcome) is what every tasks floor shares.
UNIT_FLOORS = {
    "capjudge.judges": 0,
    "capjudge.metrics": 1,
    "capjudge.tasks": 2,
    "capjudge.tasks.harness": 3,  # the lmms-eval glue: task classes, process_results, aggregations, who judges
    "capjudge.models": 3,  # the lmms-eval model (captions_file): a unit of its own, no longer counted in tasks
    "capjudge.tasks.runs": 4,  # the runs the commands start: judging stage, Batch stage, sensitivity, demo
    "capjudge.tasks.cli": 5,  # argument parsing on top
    "capjudge.api": 6,  # the users' entry (README "Python API")
}
# Packages on a floor of their own above their folder's: the public API may import every layer, and nothing in
# capjudge may import it (it is the users' entry, never a dependency of the commands or the tasks).
PACKAGE_LAYER = {"capjudge.api": 3}
# Nothing imports these but their own modules (and, for the command line, the public API above it): they are
# entries, never a dependency.
ENTRY_UNITS = ("capjudge.tasks.cli", "capjudge.api")


def _task_folders() -> set[str]:
    """The folders of tasks/ that are data for lmms-eval, not capjudge modules: the task folders it loads by
    path (YAML + utils.py) and packaged data (demo/). Known by convention, so that a new judge's task folder
    needs no edit here (README, "A third judge"): a folder of tasks/ without an __init__.py that holds a task
    YAML, or no Python at all. A code package that lacks its __init__.py holds Python and no YAML: it stays a
    package here, and the pyproject check below names it."""
    found = set()
    for folder in (REPO_ROOT / "tasks").iterdir():
        if not folder.is_dir() or folder.name == "__pycache__" or (folder / "__init__.py").exists():
            continue
        if any(folder.glob("*.yaml")) or not any(folder.rglob("*.py")):
            found.add(folder.name)
    return found


TASK_FOLDERS = _task_folders()
# A module longer than this holds more than one job: split it by job (issue #38).
MAX_MODULE_LINES = 450


def _package_of(path: Path) -> tuple[str, Path]:
    """The package a folder's modules are installed under, and the folder that package starts at."""
    relative = path.relative_to(REPO_ROOT).as_posix()
    for folder, package in RENAMED_FOLDERS.items():
        if relative == folder or relative.startswith(folder + "/"):
            return package, REPO_ROOT / folder
    top = relative.split("/", 1)[0]
    return TOP_FOLDERS[top], REPO_ROOT / top


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every capjudge module (package __init__ files included)."""
    found = {}
    for top in TOP_FOLDERS:
        for path in sorted((REPO_ROOT / top).rglob("*.py")):
            relative = path.relative_to(REPO_ROOT / top)
            if "__pycache__" in relative.parts or (top == "tasks" and relative.parts[0] in TASK_FOLDERS):
                continue
            package, root = _package_of(path.parent)
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _data_packages() -> set[str]:
    """The folders of data the wheel carries, as the packages they install as: the templates and the task
    folders lmms-eval loads by path."""
    templates = {f"{package}.templates" for top, package in TOP_FOLDERS.items() if (REPO_ROOT / top / "templates").is_dir()}
    return templates | {f"capjudge.tasks.{folder}" for folder in TASK_FOLDERS}


def _readme_layout_block() -> str:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Layout\n", 1)[1]
    return section.split("```", 2)[1]


def _readme_layout_modules() -> set[str]:
    """The modules the README's layout tree names: the first word of each line is a node, its indentation its
    depth (two spaces a level) under the nearest shallower folder."""
    listed, folders = set(), []  # folders: (indent, name) of the open folders
    for line in _readme_layout_block().splitlines():
        if not line.strip():
            continue
        indent, node = len(line) - len(line.lstrip(" ")), line.split()[0]
        folders = [(depth, name) for depth, name in folders if depth < indent]
        if node.endswith("/"):
            folders.append((indent, node))
        elif node.endswith(".py") and folders and folders[0][1].rstrip("/") in TOP_FOLDERS:
            listed.add("".join(name for _, name in folders) + node)
    return listed


def test_the_readme_layout_lists_every_module_and_only_modules_that_exist():
    listed = _readme_layout_modules()
    on_disk = {str(path.relative_to(REPO_ROOT)) for path in _modules().values() if path.name not in ("__init__.py", "__main__.py")}
    assert sorted(on_disk - listed) == [], "modules missing from README.md's layout"
    assert sorted(listed - on_disk) == [], "README.md's layout names modules that do not exist"


def test_pyproject_installs_every_package_and_no_other():
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    packages = {name for name, path in _modules().items() if path.name == "__init__.py"}
    assert sorted(config["packages"]) == sorted(packages | _data_packages())
    # Each data folder installs its files (setuptools warns about, and may one day drop, data in a folder that
    # is not a listed package).
    data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    assert sorted(data) == sorted(_data_packages())
    assert config["package-dir"] == {package: top for top, package in TOP_FOLDERS.items()} | {
        package: folder for folder, package in RENAMED_FOLDERS.items()}
    # A renamed folder is installed once, under its own name: never also as a sub-package of its top folder.
    renamed_twice = [f"{top_package}.{folder.split('/', 1)[1].replace('/', '.')}"
                     for folder in RENAMED_FOLDERS for top, top_package in TOP_FOLDERS.items()
                     if folder.startswith(top + "/")]
    assert set(renamed_twice).isdisjoint(config["packages"])


def _imports(path: Path, type_checking: bool = False) -> set[str]:
    """capjudge modules a file imports, outside `if TYPE_CHECKING:` blocks (those never run), or with
    `type_checking` inside them too (a type checker follows them, so they make cycles all the same)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = set()
    for node in ast.walk(tree):
        if not type_checking and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    names = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if name.startswith("capjudge.")}


def test_every_capjudge_import_names_an_installed_module():
    """`from capjudge.x import y` / `import capjudge.x` name a module the wheel installs, in the code and the
    tests alike: an old path (e.g. capjudge.tasks.models, now capjudge.models) may still import from the
    editable checkout, whose capjudge.tasks is the whole tasks/ folder, but not from the wheel."""
    modules = _modules()
    stale = []
    for path in sorted([*modules.values(), *(REPO_ROOT / "tests").rglob("*.py")]):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            named = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
            stale += [f"{path.relative_to(REPO_ROOT)}: {name}" for name in named
                      if name.startswith("capjudge.") and name not in modules]
    assert stale == []


def _import_graph(type_checking: bool = False) -> dict[str, set[str]]:
    modules = _modules()
    return {name: {imported for imported in _imports(path, type_checking) if imported in modules and imported != name}
            for name, path in modules.items()}


def _unit(module: str) -> str:
    """The unit a module belongs to: the longest UNIT_FLOORS prefix naming it."""
    return max((unit for unit in UNIT_FLOORS if module == unit or module.startswith(unit + ".")), key=len)


def _layer(module: str, path: Path) -> int:
    """A module's floor in the installed package: its unit's (UNIT_FLOORS), whatever folder its file sits in
    (capjudge.models is the folder tasks/models, a floor of its own; capjudge.api is tasks/api)."""
    return UNIT_FLOORS[_unit(module)]


def _folder_layer(module: str, path: Path) -> int:
    """The coarse floor: its package's own (PACKAGE_LAYER), else the top folder its file sits in."""
    for package, floor in PACKAGE_LAYER.items():
        if module == package or module.startswith(package + "."):
            return floor
    return LAYER[path.relative_to(REPO_ROOT).parts[0]]


def _upward(graph: dict[str, set[str]], layer: dict[str, int]) -> list[str]:
    """Imports that go up a floor, or sideways into another unit of the same floor."""
    return [f"{module} imports {imported}" for module, imported_set in graph.items() for imported in sorted(imported_set)
            if layer[imported] > layer[module] or (layer[imported] == layer[module] and _unit(imported) != _unit(module))]


def test_imports_only_go_down_the_layers():
    # Type-only imports count too: an annotation naming a higher layer's type is a dependency on that layer.
    modules = _modules()
    graph = _import_graph(type_checking=True)
    layer = {name: _folder_layer(name, path) for name, path in modules.items()}
    upward = [f"{module} imports {imported}" for module, imported_set in graph.items()
              for imported in sorted(imported_set) if layer[imported] > layer[module]]
    assert upward == []
    # The finer floors: judges < metrics < the tasks package < harness, models < runs < cli < api.
    assert _upward(graph, {name: _layer(name, path) for name, path in modules.items()}) == []


def test_nothing_imports_the_entries():
    """The command line and the public API are entries: no other module imports them (type-only imports
    included). The API may use the command line's bounds; nothing may use the API."""
    graph = _import_graph(type_checking=True)
    into_entries = [f"{module} imports {imported}" for module, imported_set in graph.items()
                    for imported in sorted(imported_set)
                    if _unit(imported) in ENTRY_UNITS and _unit(module) not in ENTRY_UNITS]
    assert into_entries == []
    assert [f"{module} imports {imported}" for module, imported_set in graph.items() for imported in sorted(imported_set)
            if _unit(imported) == "capjudge.api" and _unit(module) != "capjudge.api"] == []
    # Every floor is populated: a unit named above that no module belongs to is a stale entry.
    assert {_unit(name) for name in _modules()} == set(UNIT_FLOORS)


def test_every_tasks_package_has_a_floor():
    """A new package directly under tasks/ chooses its floor here (UNIT_FLOORS): otherwise it would count as the
    tasks package's own floor, below the glue, without anyone deciding it."""
    packages = {name for name, path in _modules().items() if path.name == "__init__.py"}
    direct = {name for name in packages if name.startswith("capjudge.tasks.") and name.count(".") == 2}
    assert sorted(direct - set(UNIT_FLOORS)) == []


def test_the_floors_see_an_arrow_back_up():
    """The floor checks read real imports: an arrow from the lmms-eval model into the glue (the one issue #48
    found, captions_file importing tasks.judged.run_outcome), from the glue into the runs, and from a run into
    the command line are each reported."""
    layer = {"capjudge.models.captions_file": 3, "capjudge.tasks.harness.run_outcome": 3,
             "capjudge.tasks.harness.judged_task": 3, "capjudge.tasks.runs.judging.stage": 4,
             "capjudge.tasks.cli.bounds": 5, "capjudge.tasks.run_outcome": 2}
    graph = {"capjudge.models.captions_file": {"capjudge.tasks.harness.run_outcome"},
             "capjudge.tasks.harness.judged_task": {"capjudge.tasks.runs.judging.stage", "capjudge.tasks.run_outcome"},
             "capjudge.tasks.runs.judging.stage": {"capjudge.tasks.cli.bounds"}}
    assert _upward(graph, layer) == [
        "capjudge.models.captions_file imports capjudge.tasks.harness.run_outcome",
        "capjudge.tasks.harness.judged_task imports capjudge.tasks.runs.judging.stage",
        "capjudge.tasks.runs.judging.stage imports capjudge.tasks.cli.bounds"]
    assert _unit("capjudge.models") == "capjudge.models" and _unit("capjudge.tasks.run_outcome") == "capjudge.tasks"
    assert _unit("capjudge.tasks.runs.sensitivity.judging") == "capjudge.tasks.runs"


def test_no_import_cycles():
    # Imports under `if TYPE_CHECKING:` count: a cycle through a type-only import is still two modules that
    # cannot be read, moved or checked apart.
    graph = _import_graph(type_checking=True)
    # A package's __init__ is imported with each of its modules; an edge into a package name means its __init__.
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for successor in sorted(graph.get(node, ())):
            if state.get(successor) == "open":
                cycles.append(" -> ".join(stack[stack.index(successor):] + [node, successor]) if successor in stack
                              else f"{node} -> {successor}")
            elif successor not in state:
                visit(successor, stack + [node])
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    assert cycles == []


def _line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _too_long(paths: list[Path]) -> list[str]:
    return [f"{path.relative_to(REPO_ROOT)}: {lines} lines" for path in paths
            if (lines := _line_count(path)) > MAX_MODULE_LINES]


def test_no_module_is_longer_than_the_limit():
    assert _too_long(sorted(_modules().values())) == [], f"modules over {MAX_MODULE_LINES} lines: split them by job"


def test_the_layout_checks_can_fail():
    """The checks above read real files: prove they see an upward import and a cycle when there is one."""
    assert "capjudge.judges.types" in _imports(REPO_ROOT / "judges" / "video.py")
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from capjudge.tasks.cli import main\nfrom capjudge.metrics.files import runs\n"
    probe = REPO_ROOT / "tests" / "__layout_probe__.py"
    try:
        probe.write_text(source, encoding="utf-8")
        assert _imports(probe) == {"capjudge.metrics.files", "capjudge.metrics.files.runs"}
        assert _imports(probe, type_checking=True) == {"capjudge.metrics.files", "capjudge.metrics.files.runs",
                                                       "capjudge.tasks.cli", "capjudge.tasks.cli.main"}
        probe.write_text("x = 1\n" * (MAX_MODULE_LINES + 1), encoding="utf-8")
        assert _too_long([probe]) == [f"tests/__layout_probe__.py: {MAX_MODULE_LINES + 1} lines"]
        probe.write_text("x = 1\n" * MAX_MODULE_LINES, encoding="utf-8")
        assert _too_long([probe]) == []
    finally:
        probe.unlink()
    assert re.search(r"^judges/", _readme_layout_block(), re.M)
    # The public API is its own floor, above the commands: a tasks module importing it would import upward.
    modules = _modules()
    assert _layer("capjudge.api.judging", modules["capjudge.api.judging"]) > _layer("capjudge.tasks.cli.main",
                                                                                    modules["capjudge.tasks.cli.main"])
    # The task folders are found by convention: the shipped ones, and no code package among them.
    assert {"gveval", "anycap_style", "demo", "suites"} <= TASK_FOLDERS
    assert not TASK_FOLDERS & {"cli", "judged", "judging", "models", "sensitivity"}
    assert not TASK_FOLDERS & {"harness", "runs", "api"}
    assert {"judges/client/judge_client.py", "tasks/cli/main.py", "judges/types.py"} <= _readme_layout_modules()


# Names that must mean one thing across the package (issue #38 item 4): a public top-level class or function
# is defined in one module only. A leading underscore keeps a name inside its module, so private helpers may
# repeat. Each entry below lists exactly the modules allowed to define the name, so a further definition
# anywhere else still fails.
ALLOWED_REPEATS = {
    # Module protocols: the same function in each module of a kind, called through the module.
    "main": {"judges/local/llama_server.py", "tasks/cli/main.py", "tasks/cli/reference.py",
             "tasks/cpu_requirements.py"},  # `python -m`
    # Each subcommand module of tasks/cli: register(subparsers) and run(args), found by tasks/cli/main.py.
    "register": {f"tasks/cli/{name}.py" for name in ("agreement", "anycap", "arena", "cache", "correlate", "demo", "estimate",
                                                     "gveval", "judge", "leaderboard", "reliability", "report",
                                                     "sensitivity", "serve_local", "tasks_folder", "vatex")},
    "run": {f"tasks/cli/{name}.py" for name in ("arena", "demo", "estimate", "judge", "leaderboard", "sensitivity")},
}
# Each judge module's own API (its prompt, its request, its constrained-reply schema), called as
# `gveval.render_prompt(...)` / `anycap.build_request(...)`: the same role, one per judge. Allowed in every
# judge's `judges/<judge>/judge.py` by that convention, so a new judge needs no entry here; anywhere else they
# clash like any other name.
JUDGE_MODULE_ROLES = ("build_request", "load_template", "local_reply_constraint", "render_prompt")
JUDGE_MODULE = re.compile(r"judges/[a-z0-9_]+/judge\.py")
# The same convention for a judge's pairwise prompt (`capjudge arena`), in `judges/<judge>/pairwise.py`.
PAIRWISE_MODULE_ROLES = ("build_pairwise_request", "local_pairwise_constraint", "parse_pairwise_reply",
                         "render_pairwise_prompt")
PAIRWISE_MODULE = re.compile(r"judges/[a-z0-9_]+/pairwise\.py")


def _may_repeat(name: str, files: set[str]) -> bool:
    if name in JUDGE_MODULE_ROLES:
        return all(JUDGE_MODULE.fullmatch(file) for file in files)
    if name in PAIRWISE_MODULE_ROLES:
        return all(PAIRWISE_MODULE.fullmatch(file) for file in files)
    return files <= ALLOWED_REPEATS.get(name, set())


def _public_definitions(paths: list[Path]) -> dict[str, set[str]]:
    """Public top-level class and function name -> the files (relative to the repository) defining it."""
    defined: dict[str, set[str]] = {}
    for path in paths:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                defined.setdefault(node.name, set()).add(path.relative_to(REPO_ROOT).as_posix())
    return defined


def _repeated_names(paths: list[Path]) -> list[str]:
    return [f"{name}: {', '.join(sorted(files))}" for name, files in sorted(_public_definitions(paths).items())
            if len(files) > 1 and not _may_repeat(name, files)]


def test_each_public_name_is_defined_in_one_module():
    assert _repeated_names(sorted(_modules().values())) == [], "one name, two meanings: rename one of them"


def test_the_repeated_names_check_can_fail():
    first, second = REPO_ROOT / "tests" / "__names_probe_a__.py", REPO_ROOT / "tests" / "__names_probe_b__.py"
    try:
        first.write_text("class Interval:\n    pass\n\ndef _helper():\n    pass\n\ndef main():\n    pass\n", encoding="utf-8")
        second.write_text("def Interval():\n    pass\n\ndef _helper():\n    pass\n", encoding="utf-8")
        assert _repeated_names([first, second]) == [
            "Interval: tests/__names_probe_a__.py, tests/__names_probe_b__.py"]
        # An allowed name defined outside the modules allowed to define it fails too.
        second.write_text("def main():\n    pass\n", encoding="utf-8")
        assert _repeated_names([first, second]) == ["main: tests/__names_probe_a__.py, tests/__names_probe_b__.py"]
        # A judge module's role name outside a judge module clashes too.
        first.write_text("def build_request():\n    pass\n", encoding="utf-8")
        second.write_text("def build_request():\n    pass\n", encoding="utf-8")
        assert _repeated_names([first, second]) == [
            "build_request: tests/__names_probe_a__.py, tests/__names_probe_b__.py"]
    finally:
        first.unlink(missing_ok=True)
        second.unlink(missing_ok=True)
    # Every allowed repeat is still a repeat: an entry whose modules no longer define the name is stale.
    defined = _public_definitions(sorted(_modules().values()))
    assert {name: files for name, files in ALLOWED_REPEATS.items() if not files <= defined.get(name, set())} == {}
    shipped_judges = {"judges/gveval/judge.py", "judges/anycap/judge.py"}
    assert {name: defined.get(name) for name in JUDGE_MODULE_ROLES if not shipped_judges <= defined.get(name, set())} == {}


def test_who_judges_is_told_apart_in_one_place():
    """One judge or a panel is decided where who judges is built (tasks/harness/who_judges.py for judging;
    capjudge.metrics.files.judged_by for the readers, from what a run logged): nowhere else tests a panel for
    None (#38 item 2)."""
    found = [f"{path.relative_to(REPO_ROOT)}:{number}" for path in sorted(_modules().values())
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\bpanel is (not )?None\b", line)]
    assert [place for place in found if not place.startswith("tasks/harness/who_judges.py:")] == []
    assert found, "the check reads the files: who_judges.py's own test is seen"
