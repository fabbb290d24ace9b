"""The house plan, checked: the README's layout names every module there is, pyproject installs every
sub-package, imports only go down the floors (api -> cli -> runs -> harness -> the tasks package's own modules
-> models -> metrics -> judges) with no cycle between modules or between packages, and no module grows past
MAX_MODULE_LINES. Every import counts: top-level, type-only (`if TYPE_CHECKING:`), inside a function, relative,
and `importlib.import_module` of a literal name.

These are static checks (files and ASTs), so a module that moves, appears or starts importing upward fails
here, with its name, before a reader of the README or a wheel user finds out.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import tomllib
from collections.abc import Collection, Mapping
from itertools import combinations
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TOP_FOLDERS = {"judges": "capjudge.judges", "metrics": "capjudge.metrics", "tasks": "capjudge.tasks"}
# Folders installed as a package of their own name rather than under their top folder's: lmms-eval's plugin
# convention (LMMS_EVAL_PLUGINS=capjudge) imports `capjudge.models`, so tasks/models is that package.
# tasks/api is capjudge.api, the public Python API (README "Python API"): one namespace a notebook imports.
RENAMED_FOLDERS = {"tasks/models": "capjudge.models", "tasks/api": "capjudge.api"}
LAYER = {"judges": 0, "metrics": 1, "tasks": 2}
# The installed packages and the folders they are read from (pyproject's package-dir, checked equal below).
PACKAGE_DIR = {package: top for top, package in TOP_FOLDERS.items()} | {
    package: folder for folder, package in RENAMED_FOLDERS.items()}
# The floors of the installed package, bottom to top (issue #48 item 1): a module imports only modules of a
# lower floor, or of its own unit. A unit is the longest of these prefixes that names the module; two units on
# one floor may not import each other. A package's floors are one block (issue #61 item 4: no floor is slotted
# between another package's floors to make an edge legal): capjudge.models is a package beside capjudge.tasks,
# so it is below all of it (the commands and runs read captions files through it) and imports none of it.
# `capjudge.tasks` itself (TASKS_DIR, the version) is what every tasks floor shares.
UNIT_FLOORS = {
    "capjudge.judges": 0,
    "capjudge.metrics": 1,
    "capjudge.models": 2,  # the lmms-eval model (captions_file): a package of its own, under all of capjudge.tasks
    "capjudge.tasks": 3,
    "capjudge.tasks.harness": 4,  # the lmms-eval glue: task classes, process_results, aggregations, who judges
    "capjudge.tasks.runs": 5,  # the runs the commands start: judging stage, Batch stage, sensitivity, demo
    "capjudge.tasks.cli": 6,  # argument parsing on top
    "capjudge.api": 7,  # the users' entry (README "Python API")
}
# Units that never import each other whatever their floors (README: the lmms-eval glue and the lmms-eval model
# side by side; the model serves any lmms-eval task, the glue any lmms-eval model).
APART = (("capjudge.tasks.harness", "capjudge.models"),)
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


def _modules(root: Path = REPO_ROOT, package_dir: Mapping[str, str] = PACKAGE_DIR,
             data_folders: Collection[str] = tuple(f"tasks/{folder}" for folder in TASK_FOLDERS)) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages `package_dir` installs from `root` (package
    __init__ files included; `data_folders` hold data, not modules). A file belongs to the deepest folder
    holding it: tasks/models/captions_file.py is capjudge.models.captions_file, never capjudge.tasks.models."""
    owners = sorted(package_dir.items(), key=lambda item: len(item[1]), reverse=True)
    found = {}
    for folder in package_dir.values():
        for path in sorted((root / folder).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if "__pycache__" in path.parts or any(relative.startswith(data + "/") for data in data_folders):
                continue
            package, base = next((package, base) for package, base in owners if relative.startswith(base + "/"))
            parts = list(Path(relative[len(base) + 1:]).with_suffix("").parts)
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


def _imports(path: Path, type_checking: bool = False, module: str = "") -> set[str]:
    """capjudge modules a file imports, anywhere in it (a function's imports run too, only later), outside `if
    TYPE_CHECKING:` blocks (those never run), or with `type_checking` inside them too (a type checker follows
    them, so they make cycles all the same). With `module`, the file's own dotted name, relative imports are
    read as the absolute names they stand for. A literal `import_module("capjudge....")` is an import too."""
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
        elif isinstance(node, ast.ImportFrom) and (source := _absolute(node, module, path.name == "__init__.py")):
            names.add(source)
            names.update(f"{source}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and _imports_by_name(node):
            names.add(node.args[0].value)
    return {name for name in names if name.startswith("capjudge.")}


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str | None:
    """The module a `from ... import` names; a relative one only when the importing module's name is known."""
    if node.level == 0:
        return node.module
    anchor = module.split(".") if is_package else module.split(".")[:-1]
    if not module or node.level - 1 >= len(anchor):
        return None
    base = anchor[:len(anchor) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imports_by_name(node: ast.Call) -> bool:
    """`importlib.import_module("capjudge.x")` / `__import__("capjudge.x")` with a literal name."""
    called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    return (called in ("import_module", "__import__") and bool(node.args)
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str))


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


def _import_graph(type_checking: bool = False, modules: Mapping[str, Path] | None = None) -> dict[str, set[str]]:
    modules = _modules() if modules is None else modules
    return {name: {imported for imported in _imports(path, type_checking, name) if imported in modules and imported != name}
            for name, path in modules.items()}


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _unit(module: str, floors: Mapping[str, int] = UNIT_FLOORS) -> str:
    """The unit a module belongs to: the longest UNIT_FLOORS prefix naming it."""
    return max((unit for unit in floors if _within(module, unit)), key=len)


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


def _upward(graph: dict[str, set[str]], layer: dict[str, int], floors: Mapping[str, int] = UNIT_FLOORS) -> list[str]:
    """Imports that go up a floor, or sideways into another unit of the same floor."""
    return [f"{module} imports {imported}" for module, imported_set in graph.items() for imported in sorted(imported_set)
            if layer[imported] > layer[module]
            or (layer[imported] == layer[module] and _unit(imported, floors) != _unit(module, floors))]


def _arrows_up(graph: dict[str, set[str]], floors: Mapping[str, int] = UNIT_FLOORS,
               apart: Collection[tuple[str, str]] = APART) -> list[str]:
    """Every import that goes up a floor or sideways (`_upward`, each module on its unit's floor), and every
    import between two units kept `apart`, either way."""
    layer = {module: floors[_unit(module, floors)] for module in graph}
    between = [f"{module} imports {imported}" for module, imported_set in graph.items() for imported in sorted(imported_set)
               if {_unit(module, floors), _unit(imported, floors)} in [set(pair) for pair in apart]]
    return _upward(graph, layer, floors) + between


def _interleaved_floors(floors: Mapping[str, int]) -> list[str]:
    """Packages whose floors are not one block: beside each other (the children of one package), each package's
    units must lie wholly below or wholly above the other's, or both be one unit on one floor; a package's own
    modules lie below its sub-packages. Otherwise a unit was slotted between another package's floors."""
    found = []
    for first, second in combinations(sorted(floors), 2):
        if _within(second, first):
            if floors[second] <= floors[first]:
                found.append(f"{second} (floor {floors[second]}) is not above its package {first} ({floors[first]})")
            continue
        shared = _shared_depth(first, second)
        sides = [".".join(name.split(".")[:shared + 1]) for name in (first, second)]
        spans = [sorted(floor for unit, floor in floors.items() if _within(unit, side)) for side in sides]
        apart = spans[0][-1] < spans[1][0] or spans[1][-1] < spans[0][0]
        if not apart and not (len(spans[0]) == len(spans[1]) == 1 and spans[0] == spans[1]):
            found.append(f"{sides[0]} (floors {spans[0]}) and {sides[1]} (floors {spans[1]}) interleave")
    return sorted(set(found))


def _shared_depth(first: str, second: str) -> int:
    """How many leading dotted parts two names share."""
    shared = 0
    for mine, theirs in zip(first.split("."), second.split(".")):
        if mine != theirs:
            break
        shared += 1
    return shared


def _package_graph(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """The imports between packages: each import an arrow between the two children of the deepest package holding
    both modules (capjudge.metrics.files.runs importing capjudge.metrics.statistics.value_ci: metrics.files ->
    metrics.statistics; a child may be a module). A module importing its own package's __init__ (or the reverse)
    is no arrow here: that is the module graph's to check."""
    packages: dict[str, set[str]] = {}
    for module, imported_set in graph.items():
        for imported in imported_set:
            shared = _shared_depth(module, imported)
            if shared in (module.count(".") + 1, imported.count(".") + 1):
                continue
            source, target = (".".join(name.split(".")[:shared + 1]) for name in (module, imported))
            packages.setdefault(source, set()).add(target)
    return packages


def _tangles(graph: Mapping[str, set[str]]) -> list[str]:
    """Each group of nodes that all reach each other (a cycle, or several sharing nodes), named once."""
    reached = {}
    for start in graph:
        seen, todo = set(), [start]
        while todo:
            for successor in graph.get(todo.pop(), ()):
                if successor not in seen:
                    seen.add(successor)
                    todo.append(successor)
        reached[start] = seen
    groups = {frozenset(other for other in reached[node] if node in reached.get(other, ())) for node in graph
              if node in reached[node]}
    return sorted(" <-> ".join(sorted(group)) for group in groups)


def test_imports_only_go_down_the_layers():
    # Type-only imports count too: an annotation naming a higher layer's type is a dependency on that layer.
    modules = _modules()
    graph = _import_graph(type_checking=True)
    layer = {name: _folder_layer(name, path) for name, path in modules.items()}
    upward = [f"{module} imports {imported}" for module, imported_set in graph.items()
              for imported in sorted(imported_set) if layer[imported] > layer[module]]
    assert upward == []
    # The finer floors: judges < metrics < models < the tasks package < harness < runs < cli < api.
    assert _upward(graph, {name: _layer(name, path) for name, path in modules.items()}) == []


def _same_modules(installed: Path, source: Path) -> bool:
    """The two folders hold the same Python files with the same bytes (sub-folders are packages of their own)."""
    names = sorted(path.name for path in source.glob("*.py"))
    return names == sorted(path.name for path in installed.glob("*.py")) and all(
        (installed / name).read_bytes() == (source / name).read_bytes() for name in names)


def test_no_arrow_back_up_on_the_installed_packages_real_imports():
    """Issue #61 item 4: every import of every module the wheel installs (type-only and in-function ones
    included) goes down a floor; the lmms-eval glue and the lmms-eval model never import each other; and each
    package's floors are one block, so no floor was given to make an edge legal."""
    # The folders read are the installed package's: the editable install maps the same package-dir; a wheel built
    # from this tree (tests/installed/test_third_judge_from_readme.py runs this file against one) holds the same
    # files, byte for byte.
    for package, folder in PACKAGE_DIR.items():
        installed, source = Path(importlib.util.find_spec(package).origin).parent, REPO_ROOT / folder
        assert installed == source or _same_modules(installed, source), (package, installed, source)
    assert _arrows_up(_import_graph(type_checking=True)) == []
    assert _interleaved_floors(UNIT_FLOORS) == []


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
    assert _tangles(graph) == []


# The arrows between packages that still close a cycle (issue #61 item 3), each the one going the wrong way, to be
# removed by moving code, never by adding an entry: with these left out the packages have no cycle, and an entry
# that no longer closes one fails too (then delete it).
OPEN_PACKAGE_ARROWS = {
    # metrics.files.panel_figures builds statistics.value_ci.ValueCI, while statistics.judge_agreement and
    # statistics.reliability read runs through metrics.files: panel_figures belongs beside panel_agreement.
    ("capjudge.metrics.files", "capjudge.metrics.statistics"),
    # arena.verdict_outputs writes item_report.arena_page (which reads the arena's statistics), and arena's
    # verdict_outputs and verdict_plot take their stamps and guard from sensitivity.outputs (whose items_page
    # builds on item_report.page): the arena's page and its files' guard have no home of their own yet.
    ("capjudge.metrics.arena", "capjudge.metrics.item_report"),
    ("capjudge.metrics.arena", "capjudge.metrics.sensitivity"),
}


def test_no_package_cycles():
    """No two packages import each other, at any depth (type-only and in-function imports included):
    capjudge.models and capjudge.tasks, capjudge.metrics.files and capjudge.metrics.statistics are two packages a
    reader cannot take apart when each imports the other."""
    packages = _package_graph(_import_graph(type_checking=True))
    assert _tangles({source: targets - {target for target in targets if (source, target) in OPEN_PACKAGE_ARROWS}
                     for source, targets in packages.items()}) == []
    # Each open arrow is still there and still on a cycle: one fixed is deleted above, not left to hide another.
    tangles = [set(tangle.split(" <-> ")) for tangle in _tangles(packages)]
    assert sorted(arrow for arrow in OPEN_PACKAGE_ARROWS if arrow[1] not in packages.get(arrow[0], set())
                  or not any(set(arrow) <= tangle for tangle in tangles)) == []


def _write_tree(root: Path, files: Mapping[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")


def test_the_checks_see_an_arrow_back_up_in_a_package_tree(tmp_path):
    """A tiny package tree in the real one's shape (a renamed folder included: tasks/models is capjudge.models):
    each kind of upward import (type-only, inside a function, relative, by name) is reported, the
    packages that import each other are a cycle, and a floor slotted between another package's is named."""
    _write_tree(tmp_path, {
        "judges/__init__.py": "",
        "judges/clean.py": "import os\n",
        "judges/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from capjudge.tasks.top import Top\n",
        "judges/lazy.py": "def later():\n    from capjudge.tasks import top\n    return top\n",
        "judges/relative.py": "from ..tasks import top\n",
        "judges/by_name.py": "import importlib\n\ndef later():\n    return importlib.import_module('capjudge.tasks.top')\n",
        "tasks/__init__.py": "",
        "tasks/top.py": "from capjudge.judges import clean\nfrom capjudge.models import model\n",
        "tasks/models/__init__.py": "",
        "tasks/models/model.py": "from capjudge.judges.clean import os\nfrom capjudge.tasks import top\n",
        "tasks/data/utils.py": "from capjudge.tasks import top\n",  # a data folder: no module
    })
    package_dir = {"capjudge.judges": "judges", "capjudge.tasks": "tasks", "capjudge.models": "tasks/models"}
    modules = _modules(tmp_path, package_dir, data_folders=("tasks/data",))
    assert sorted(modules) == ["capjudge.judges", "capjudge.judges.by_name", "capjudge.judges.clean",
                               "capjudge.judges.lazy", "capjudge.judges.relative", "capjudge.judges.typed",
                               "capjudge.models", "capjudge.models.model", "capjudge.tasks", "capjudge.tasks.top"]
    floors = {"capjudge.judges": 0, "capjudge.models": 1, "capjudge.tasks": 2}
    graph = _import_graph(type_checking=True, modules=modules)
    upward = ["capjudge.judges.by_name imports capjudge.tasks.top",
              "capjudge.judges.lazy imports capjudge.tasks",
              "capjudge.judges.lazy imports capjudge.tasks.top",
              "capjudge.judges.relative imports capjudge.tasks",
              "capjudge.judges.relative imports capjudge.tasks.top",
              "capjudge.judges.typed imports capjudge.tasks.top",
              "capjudge.models.model imports capjudge.tasks",
              "capjudge.models.model imports capjudge.tasks.top"]
    assert sorted(_arrows_up(graph, floors, apart=())) == upward
    # Without the type-only imports (the run-time graph), every arrow but the type-only one is still seen.
    assert sorted(_arrows_up(_import_graph(modules=modules), floors, apart=())) == [
        arrow for arrow in upward if not arrow.startswith("capjudge.judges.typed ")]
    # The model and the tasks package import each other: a cycle of modules, and of packages with judges.
    assert _tangles(graph) == ["capjudge.models.model <-> capjudge.tasks.top"]
    assert _tangles(_package_graph(graph)) == ["capjudge.judges <-> capjudge.models <-> capjudge.tasks"]
    # Two units kept apart are reported either way, whatever their floors.
    assert _arrows_up({"capjudge.tasks.top": {"capjudge.models.model"}, "capjudge.models.model": set()},
                      floors, apart=(("capjudge.tasks", "capjudge.models"),)) == [
        "capjudge.tasks.top imports capjudge.models.model"]
    # The old plan: capjudge.models slotted between the tasks package's own floor and its harness.
    assert _interleaved_floors({"capjudge.judges": 0, "capjudge.tasks": 2, "capjudge.tasks.harness": 3,
                                "capjudge.models": 3, "capjudge.tasks.runs": 4}) == [
        "capjudge.models (floors [3]) and capjudge.tasks (floors [2, 3, 4]) interleave"]
    assert _interleaved_floors({"capjudge.tasks": 2, "capjudge.tasks.harness": 2}) == [
        "capjudge.tasks.harness (floor 2) is not above its package capjudge.tasks (2)"]


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
