"""Print the lowest versions capjudge declares for the libraries its unit tests exercise, pinned exactly.

`make test-min` installs these into a venv of their own and runs the unit tests that touch them, so each
floor in pyproject.toml is proven, not guessed (a floor below the first release with an API the code calls
fails there). The harness itself (lmms-eval, datasets, and filelock, capped for the harness's sake) and the
baselines' pycocoevalcap are tested at the versions `make setup` installs.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

NOT_HERE = {"lmms-eval", "datasets", "filelock", "pycocoevalcap"}


def lowest(pyproject: Path) -> list[str]:
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    pins = []
    for line in project["dependencies"]:
        requirement = Requirement(line)
        if requirement.name in NOT_HERE:
            continue
        floors = [spec.version for spec in requirement.specifier if spec.operator in (">=", "==")]
        if len(floors) != 1:
            raise SystemExit(f"{requirement.name}: declare exactly one lower bound (>= or ==) in pyproject.toml")
        pins.append(f"{requirement.name}=={floors[0]}")
    return pins


if __name__ == "__main__":
    print("\n".join(lowest(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("pyproject.toml"))))
