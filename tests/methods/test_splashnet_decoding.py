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
