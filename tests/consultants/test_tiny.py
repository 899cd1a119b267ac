"""The tiny model's sizes (benchmark/consultants/tiny.py): the `text` size's tokenizer learns the
env families' own words, so text-game prompts and commands cost fewer tokens."""

from __future__ import annotations

from transformers import AutoTokenizer

from benchmark.consultants.tiny import SIZES, family_vocabularies
from benchmark.envs.family import get_family

GAME_TEXT = (
    "-= Kitchen =-\nYou are in a kitchen. You see a closed refrigerator and a wooden chest. "
    "There is an unguarded exit to the east.\n> take red apple from wooden chest\n> open fridge"
)


def test_textworld_names_its_own_words_and_grids_add_none():
    words = get_family("textworld").vocabulary()
    assert words == get_family("textworld").vocabulary()  # deterministic: the package's data
    lines = words.splitlines()
    assert len(lines) > 500 and len(set(lines)) == len(lines)
    for phrase in ("kitchen", "open", "take", "refrigerator", "chest"):
        assert any(phrase in line.split() for line in lines), phrase
    assert get_family("grid").vocabulary() == ""
    assert words in family_vocabularies()


def test_the_text_size_spends_fewer_tokens_on_a_text_game(tiny_model):
    text = AutoTokenizer.from_pretrained(tiny_model("text"))
    small = AutoTokenizer.from_pretrained(tiny_model("small"))
    assert len(text) > len(small)
    n_text, n_small = len(text(GAME_TEXT).input_ids), len(small(GAME_TEXT).input_ids)
    assert n_text < 0.8 * n_small, (n_text, n_small)
    assert text.decode(text(GAME_TEXT).input_ids) == GAME_TEXT  # byte-level: lossless
    assert SIZES["text"]["hidden_size"] == SIZES["small"]["hidden_size"]
