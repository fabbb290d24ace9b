"""What the README's examples write, when a user runs them from a checkout, is ignored by git (issue #63 item 6:
`results/{runs,arena,judged,leaderboard,vatex}`, `dist/` and `cpu-requirements.txt` were left untracked), and
nothing tracked is: results/*.md, the benchmark reports, stay tracked.

The outputs are read from the README itself (each example's `makes` files, and every `--out` / `--output_path`
folder or `> FILE` its commands name), so an example added later that writes somewhere new fails here until
.gitignore covers it.
"""

from __future__ import annotations

import re
import subprocess

from tests.support.paths import REPO_ROOT
from tests.support.readme_examples import examples

# A command's output folder or redirected file, as the README's examples write them.
_OUTPUT = re.compile(r"(?:--out|--output_path)[ =]+(\S+)|>\s*([\w./-]+\.\w+)")


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, check=False)


def _written_paths() -> set[str]:
    """Paths (relative to the folder an example runs in) the README's examples write: a file each makes (a glob's
    `*` as a name), and a file inside each folder they write to. Placeholders (DIR, OUT) and variables are not
    paths."""
    paths = set()
    for example in examples():
        paths.update(made.replace("*", "any") for made in example.makes)
        for folder, file in _OUTPUT.findall(example.code):
            target = folder or file
            if "$" in target or target.startswith("/") or re.search(r"[A-Z]{3}", target) or "[" in target:
                continue
            paths.add(target if file else f"{target}/any_results.json")
    return paths


def test_every_file_the_readme_examples_write_is_ignored_and_nothing_tracked_is():
    written = _written_paths()
    # The README's examples, as issue #63 found them untracked, are among those read.
    for expected in ("results/runs/", "results/arena/", "results/judged/", "results/leaderboard/", "results/vatex/",
                     "dist/", "cpu-requirements.txt"):
        assert any(path.startswith(expected) for path in written), expected
    checked = _git("check-ignore", "--verbose", "--non-matching", *sorted(written))
    not_ignored = [line.split("\t", 1)[1] for line in checked.stdout.splitlines() if line.startswith("::\t")]
    assert not_ignored == []
    assert _git("ls-files", "--cached", "--ignored", "--exclude-standard").stdout == ""
    tracked_reports = _git("ls-files", "results").stdout.split()
    assert "results/benchmarks.md" in tracked_reports
    assert _git("check-ignore", "--no-index", *tracked_reports).stdout == ""  # no pattern matches them either
