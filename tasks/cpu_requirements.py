"""The requirements of lmms-eval and capjudge for a machine without a GPU: every declared requirement but
torchvision, with the installed CPU torch pinned.

Why this exists: lmms-eval declares `torchvision` (and `timm`, which requires it). On PyPI torchvision exists
only as a build for the newest torch with CUDA, and installing it replaces a CPU torch with that torch and a
few gigabytes of CUDA libraries (and PyPI's torchvision does not import beside PyTorch's CPU wheel). capjudge
never imports torchvision, and lmms-eval imports it only inside model files a caption judge never loads. So:
install torch from PyTorch's CPU index, lmms-eval and capjudge with `--no-deps`, then exactly this list:

    python -m capjudge.tasks.cpu_requirements 'capjudge[local]' lmms-eval > cpu-requirements.txt
    pip install -r cpu-requirements.txt

(README, "Using capjudge in your own lmms-eval environment"; `make setup` does the same for a checkout.)
Environment markers and the named extras are respected. The installed torch is pinned (`torch==X`) so that
nothing in the list moves it; `pip check` then reports only the torchvision and timm left out on purpose.

It runs before the other dependencies are installed, so it needs nothing but the standard library and
`packaging` (pip itself does not make its own copy importable).
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, requires, version

from packaging.requirements import Requirement

# Left out on purpose (see above); the distributions named on the command line are installed already.
LEFT_OUT = {"torchvision", "timm"}
DEFAULT_DISTRIBUTIONS = ("capjudge[local]", "lmms-eval")


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def requirements_of(distribution: str, extras: set[str], skip: set[str]) -> list[str]:
    """The requirements `distribution` declares for `extras`, markers evaluated here, minus `skip`."""
    found = []
    for line in requires(distribution) or []:
        requirement = Requirement(line)
        if _canonical(requirement.name) in skip:
            continue
        if requirement.marker is not None and not any(
                requirement.marker.evaluate({"extra": extra}) for extra in (extras or {""})):
            continue
        requirement.marker = None
        found.append(str(requirement))
    return found


def cpu_requirements(specs: list[str]) -> list[str]:
    """Requirement lines for `specs` ("dist[extra,...]", installed with --no-deps), sorted, one per line."""
    named = [Requirement(spec) for spec in specs]
    skip = {_canonical(name) for name in LEFT_OUT} | {_canonical(spec.name) for spec in named}
    lines = {line for spec in named for line in requirements_of(spec.name, set(spec.extras), skip)}
    try:  # the CPU torch already installed stays: pinned, every other requirement on torch must admit it
        lines.add(f"torch=={version('torch').split('+', 1)[0]}")
    except PackageNotFoundError:
        pass
    return sorted(lines)


def main(argv: list[str]) -> int:
    specs = argv or list(DEFAULT_DISTRIBUTIONS)
    try:
        lines = cpu_requirements(specs)
    except PackageNotFoundError as error:
        print(f"capjudge cpu-requirements: {error.args[0]} is not installed: install it first with "
              "pip install --no-deps (see this module's docstring)", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
