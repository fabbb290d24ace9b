"""capjudge.metrics.sensitivity.perturbations: each perturbation does what it says, records it, is seeded by
(seed, item id, name) alone, and borrows only other clips' captions."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter

import pytest

from capjudge.metrics.sensitivity.perturbations import (
    PERTURBATIONS,
    Perturbation,
    PerturbationError,
    contexts,
    describe_change,
    perturb,
    perturb_all,
    perturbation_named,
)

# Several candidates per clip, one text shared by two clips (a donor must still come from another clip and
# must not read the same as the caption it replaces).
CAPTIONS = [
    ("clip-a", "A man is slicing an onion in a kitchen, quickly and carefully."),
    ("clip-a", "Someone chops vegetables on a wooden board."),
    ("clip-b", "A dog runs across a grassy field; it chases a red ball."),
    ("clip-b", "A brown dog is running outside."),
    ("clip-c", "Two kids play chess at a table while their father watches."),
    ("clip-d", "A woman swims laps in an indoor pool."),
    ("clip-e", "A woman swims laps in an indoor pool."),
]
OWN = {item: {caption for other, caption in CAPTIONS if other == item} for item, _ in CAPTIONS}


def _variants(seed: int = 7) -> dict[tuple[str, str, str], str]:
    return {(v.item_id, v.original, v.perturbation): v.text for v in perturb_all(CAPTIONS, seed)}


def test_the_registry_holds_the_five_with_their_expected_directions():
    assert [p.name for p in PERTURBATIONS] == ["padding", "hallucination", "truncation", "shuffle", "mismatch"]
    padding, hallucination, truncation, shuffle, mismatch = PERTURBATIONS
    assert (padding.expected("conciseness"), padding.expected("accuracy"), padding.expected("score")) == ("down", "not_up", "not_up")
    assert (hallucination.expected("accuracy"), hallucination.expected("relevance")) == ("down", "not_up")
    assert (truncation.expected("completeness"), truncation.expected("conciseness")) == ("down", None)
    assert {shuffle.expected(d) for d in ("accuracy", "completeness", "score")} == {"down"}
    assert {mismatch.expected(d) for d in ("accuracy", "conciseness", "score")} == {"down"}
    assert perturbation_named("shuffle") is shuffle
    with pytest.raises(PerturbationError, match="known: padding"):
        perturbation_named("typos")


def test_padding_restates_the_caption_at_about_its_length():
    for (item, original, name), text in _variants().items():
        if name != "padding":
            continue
        assert text.startswith(original)
        added = text[len(original):].split()
        n = len(original.split())
        assert n < len(added) <= n + 5  # the caption again plus a lead-in of a few words
        # Nothing new: the added words are the caption's own, bar the lead-in.
        assert Counter(w.lower() for w in original.split()) <= Counter(w.lower() for w in added)


def test_hallucination_adds_one_clause_from_another_clip():
    for (item, original, name), text in _variants().items():
        if name != "hallucination":
            continue
        assert text.startswith(original) and text[len(original):].startswith(" Also, ")
        clause = text[len(original) + len(" Also, "):].rstrip(".")
        assert 0 < len(clause.split()) <= 12 and not any(mark in clause for mark in ",;:!?")
        donors = [c for other, c in CAPTIONS if other != item and c.lower().startswith(clause.lower())]
        assert donors, f"{clause!r} is no other clip's clause"
        assert not any(c.lower().startswith(clause.lower()) for c in OWN[item] if c not in donors)


def test_truncation_keeps_the_first_half_of_the_words():
    for (item, original, name), text in _variants().items():
        if name == "truncation":
            words = original.split()
            assert text.split() == words[: len(words) // 2]


def test_shuffle_keeps_the_words_and_changes_their_order_as_seeded():
    for (item, original, name), text in _variants(seed=3).items():
        if name != "shuffle":
            continue
        assert sorted(text.split()) == sorted(original.split()) and text != original
        # The documented seeding, reproduced by hand: random.Random("seed:item:name").
        expected, rng = original.split(), random.Random(f"3:{item}:shuffle")
        rng.shuffle(expected)
        assert text.split() == expected


def test_mismatch_borrows_another_clips_caption_never_its_own():
    for seed in range(25):
        for (item, original, name), text in _variants(seed).items():
            if name == "mismatch":
                assert text not in OWN[item] and text != original
                assert any(text == c for other, c in CAPTIONS if other != item)


def test_variants_are_deterministic_and_decided_by_seed_and_item():
    assert _variants(seed=11) == _variants(seed=11)
    assert _variants(seed=11) != _variants(seed=12)
    # The input order does not matter: only (seed, item id, name) and the pool decide.
    reordered = {(v.item_id, v.original, v.perturbation): v.text for v in perturb_all(CAPTIONS[::-1], 11)}
    assert reordered == _variants(seed=11)


def test_variants_do_not_depend_on_python_hash_randomisation():
    script = ("import json; from capjudge.metrics.sensitivity.perturbations import perturb_all; "
              f"print(json.dumps([v.text for v in perturb_all({CAPTIONS!r}, 5)]))")
    outputs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": hash_seed}).stdout for hash_seed in ("1", "2")]
    assert outputs[0] == outputs[1] and json.loads(outputs[0]) == [v.text for v in perturb_all(CAPTIONS, 5)]


def test_each_variant_records_what_the_judge_saw_and_what_changed():
    variants = perturb_all(CAPTIONS, 0)
    assert len(variants) == len(CAPTIONS) * len(PERTURBATIONS)
    for variant in variants:
        assert variant.expectations == perturbation_named(variant.perturbation).expectations
        assert variant.change == describe_change(variant.original, variant.text) != "unchanged"
    assert describe_change("a b c d", "b a d c") == "same 4 words, reordered"
    assert describe_change("a b c d", "a b") == "4 -> 2 words: deleted 'c d'"
    assert describe_change("a b", "a b x y") == "2 -> 4 words: inserted 'x y' at word 2"


def test_a_new_perturbation_is_one_function_and_its_direction():
    shout = Perturbation("shout", "upper-cases the caption", lambda caption, context: caption.upper(),
                         (("fluency", "not_up"),))
    variants = perturb_all(CAPTIONS[:2], 0, registry=(*PERTURBATIONS[:1], shout))
    assert [v.perturbation for v in variants] == ["padding", "shout"] * 2
    assert variants[1].text == CAPTIONS[0][1].upper() and shout.expected("fluency") == "not_up"


def test_unusable_inputs_are_refused_by_name():
    lonely = contexts([("only", "A cat sleeps.")], seed=0)["only"]
    with pytest.raises(PerturbationError, match="'only': no other clip's caption"):
        perturb("A cat sleeps.", lonely, perturbation_named("mismatch"))
    with pytest.raises(PerturbationError, match="empty caption"):
        perturb("   ", lonely, perturbation_named("shuffle"))
