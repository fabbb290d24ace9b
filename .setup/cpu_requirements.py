"""Print the requirements of the installed `lmms-eval` and `capjudge` distributions, minus torchvision.

Why this exists: lmms-eval declares `torchvision` (and `timm`, which requires it). On PyPI torchvision only
exists as a CUDA build that will not import beside the CPU torch wheel, and the CUDA stack costs gigabytes.
capjudge never imports torchvision, and lmms-eval only imports it inside model files we never load. So on a
machine without a GPU, `make setup` installs both distributions with --no-deps and then installs exactly this
list: every declared requirement (environment markers and chosen extras respected), except those two.
A GPU machine uses plain `pip install .` and gets everything, torchvision included.
"""

from __future__ import annotations

import sys
from importlib.metadata import requires

from packaging.requirements import Requirement

EXCLUDED = {"torchvision", "timm", "lmms-eval", "lmms_eval", "capjudge"}


def requirements_of(dist: str, extras: set[str]) -> list[str]:
    out = []
    for line in requires(dist) or []:
        req = Requirement(line)
        if req.name.lower().replace("_", "-") in {e.replace("_", "-") for e in EXCLUDED}:
            continue
        if req.marker is not None:
            if not any(req.marker.evaluate({"extra": extra}) for extra in (extras or {""})):
                continue
        req.marker = None
        out.append(str(req))
    return out


def main(argv: list[str]) -> int:
    # argv: "dist[extra1,extra2]" ...
    lines: list[str] = []
    for spec in argv:
        req = Requirement(spec)
        lines.extend(requirements_of(req.name, set(req.extras)))
    print("\n".join(sorted(set(lines))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
