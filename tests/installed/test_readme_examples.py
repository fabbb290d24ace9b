"""Every README shell example is marked with where it runs, and every checkout example runs as written.

The checkout examples run from a copy of this checkout's source (its `.venv/` linked, nothing else of the
working tree: no results of earlier runs), with a scripted judge behind the environment's judge settings, as
a user who configured one. The installed-user examples run in tests/installed/test_installed_package.py, in a fresh
venv with the built wheel; a checkout example that a test of its own runs and counts (RUN_BY_THEIR_OWN_TEST, e.g.
the 2-process accelerate launch in tests/tasks/harness/test_multi_process.py) runs there, once. What cannot run
here says why in its marker (tests/support/readme_examples.py).
"""

from __future__ import annotations

import os
import re

import pytest
from tests.support.harness_runs import judge_server
from tests.support.readme_examples import (KINDS, RUN_BY_THEIR_OWN_TEST, MarkerError, checkout_copy,
                                           checkout_env, examples, run_example)

from tests.support.paths import REPO_ROOT

CHECKOUT_EXAMPLES = [example for example in examples() if example.kind == "checkout"
                     and not any(phrase in example.code for phrase in RUN_BY_THEIR_OWN_TEST)]


def test_every_bash_block_says_where_it_runs_and_the_tests_it_names_exist():
    found = examples()  # raises MarkerError on a bash block without a marker
    assert {example.kind for example in found} == {*KINDS, "not run"}
    for example in found:
        if example.kind == "not run":
            for named in re.findall(r"tests/[\w/]+\.py", example.reason):
                assert (REPO_ROOT / named).is_file(), f"{example}: its reason names {named}, which does not exist"
    # The README's own first screen: the two commands, both said not to run here only because CI runs them.
    assert found[0].code.split() == ["make", "demo", "#", *found[0].code.split()[3:]]


def test_a_block_without_a_marker_or_with_a_bad_one_is_refused(tmp_path):
    cases = {
        "no marker": "text\n```bash\necho hi\n```\n",
        "unknown kind": "<!-- example: somewhere; makes x -->\n```bash\necho hi\n```\n",
        "no makes": "<!-- example: checkout -->\n```bash\necho hi\n```\n",
        "outside": "<!-- example: checkout; makes ../x -->\n```bash\necho hi\n```\n",
        "absolute": "<!-- example: installed; makes /etc/passwd -->\n```bash\necho hi\n```\n",
        "no reason": "<!-- example: not run here: -->\n```bash\necho hi\n```\n",
    }
    for name, text in cases.items():
        readme = tmp_path / "README.md"
        readme.write_text(text, encoding="utf-8")
        with pytest.raises(MarkerError):
            examples(readme)
    # Other languages need no marker: outputs and YAML are not commands.
    readme.write_text("```yaml\na: 1\n```\n```\noutput\n```\n", encoding="utf-8")
    assert examples(readme) == []


def test_a_run_example_fails_on_an_error_and_on_a_missing_output(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# S\n<!-- example: checkout; makes out.txt -->\n```bash\nfalse\necho made > out.txt\n```\n"
                      "<!-- example: checkout; makes out.txt -->\n```bash\necho nothing\n```\n", encoding="utf-8")
    failing, empty = examples(readme)
    with pytest.raises(AssertionError, match="exited 1"):
        run_example(failing, cwd=tmp_path, env=dict(os.environ), timeout=30)
    with pytest.raises(AssertionError, match="left no out.txt"):
        run_example(empty, cwd=tmp_path, env=dict(os.environ), timeout=30)


def test_an_example_run_by_its_own_test_is_one_checkout_example_and_that_test_runs_it():
    for phrase, test_file in RUN_BY_THEIR_OWN_TEST.items():
        found = [example for example in examples() if phrase in example.code]
        assert [example.kind for example in found] == ["checkout"], [str(example) for example in found]
        source = (REPO_ROOT / test_file).read_text(encoding="utf-8")
        assert "checkout_example(" in source and "run_example(" in source and phrase in source, test_file


@pytest.mark.slow
@pytest.mark.parametrize("example", CHECKOUT_EXAMPLES, ids=lambda example: f"line{example.line}")
def test_the_checkout_examples_run_as_written(example, tmp_path):
    copy = checkout_copy(tmp_path)
    options = {}
    if "capjudge arena" in example.code:
        # The scripted judge answers the pairwise prompt too (a length-loving rule, whatever model is asked for);
        # every other prompt as before (tests/support/scripted_pairwise_judges.py falls back to the rubric judge).
        from tests.support.scripted_pairwise_judges import PairwiseWorld

        world = PairwiseWorld()
        options["responder"] = lambda body: world.respond({**body, "model": "long"})
    with judge_server(**options) as judge:
        done = run_example(example, cwd=copy, env=checkout_env(judge.base_url, tmp_path), timeout=900)
        asked = len(judge.completions)
    if "lmms_eval" in example.code:  # judged by the scripted judge, every demo item once: not only exited 0
        assert asked == 10, done.stderr[-2000:]
