"""Greedy CTC decoding and CER against hand-checked examples."""
from __future__ import annotations

import pytest
import torch

from paperline.methods.splashnet.decoding import character_error_rate, greedy_decode, levenshtein


def test_levenshtein_hand_checked():
    # kitten -> sitting: k->s, e->i, +g = 3 (the textbook example)
    assert levenshtein("kitten", "sitting") == 3
    assert levenshtein("", "abc") == 3 and levenshtein("abc", "") == 3 and levenshtein("abc", "abc") == 0
    # "the cat" vs "teh cat": two substitutions (h->e, e->h), no transposition move
    assert levenshtein("the cat", "teh cat") == 2
    assert levenshtein("flaw", "lawn") == 2  # delete f, insert n


def test_cer_sums_edits_before_dividing():
    pairs = [("kitten", "sitting"), ("abcd", "abcd")]  # 3 edits over 6 + 4 reference characters
    assert character_error_rate(pairs) == pytest.approx(30.0)
    assert character_error_rate([("ab", "")]) == 100.0
    with pytest.raises(ValueError):
        character_error_rate([("", "x")])


def test_greedy_decode_collapses_repeats_and_drops_blanks():
    B = 98
    frames = [5, 5, B, 5, 7, 7, B, B, 9, 5]
    emissions = torch.full((len(frames), 99), -10.0)
    emissions[torch.arange(len(frames)), torch.tensor(frames)] = 0.0
    assert greedy_decode(emissions) == [5, 5, 7, 9, 5]  # a blank separates the two 5s


def _emissions(rows: list[dict[int, float]]) -> torch.Tensor:
    """(T, 99) log-probabilities from per-frame {label: probability}; the rest is blank."""
    from paperline.data.emg2qwerty import BLANK

    out = torch.full((len(rows), BLANK + 1), 1e-9)
    for t, row in enumerate(rows):
        for label, p in row.items():
            out[t, label] = p
        out[t, BLANK] = 1 - sum(row.values())
    return out.log()


def test_beam_search_finds_the_labelling_greedy_misses():
    from paperline.methods.splashnet.decoding import beam_decode

    # two frames, each 'a' 0.4 / blank 0.6: greedy reads "" (path 0.36), while "a" sums
    # 0.4·0.4 + 0.4·0.6 + 0.6·0.4 = 0.64 over its three paths (hand-checked)
    a = 0
    emissions = _emissions([{a: 0.4}, {a: 0.4}])
    assert greedy_decode(emissions) == []
    assert beam_decode(emissions, beam_size=4) == [a]
    # a repeat needs a blank between its two labels; 'a' 'a' without one is one label
    assert beam_decode(_emissions([{a: 0.99}, {}, {a: 0.99}])) == [a, a]
    assert beam_decode(_emissions([{a: 0.99}, {a: 0.99}])) == [a]


def test_the_char_lm_is_normalized_and_steers_an_ambiguous_frame(tmp_path):
    from paperline.data.emg2qwerty import CHAR_TO_LABEL, NUM_CLASSES
    from paperline.methods.splashnet.char_lm import CharNgramLM
    from paperline.methods.splashnet.decoding import beam_decode

    lm = CharNgramLM.train("the then there these them the other " * 20, order=3)
    t, h, e, x = (CHAR_TO_LABEL[c] for c in "thex")
    for context in ([], [t], [t, h], [x, x]):
        assert sum(lm.prob(context, c) for c in range(NUM_CLASSES)) == pytest.approx(1.0)
    assert lm.prob([t, h], e) > 0.5 and lm.prob([t, h], x) < 0.01
    # "th" then a frame that cannot tell 'e' from 'x' (x a little ahead): the LM picks 'e'
    emissions = _emissions([{t: 0.9}, {}, {h: 0.9}, {}, {x: 0.46, e: 0.44}, {}])
    assert beam_decode(emissions) == [t, h, x]
    assert beam_decode(emissions, lm=lm, lm_weight=0.5) == [t, h, e]
    again = CharNgramLM.load(lm.save(tmp_path / "lm.json"))
    assert again.prob([t, h], e) == pytest.approx(lm.prob([t, h], e))
