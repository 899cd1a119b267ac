"""The tiny model's sizes (benchmark/consultants/tiny.py): the `text` size's tokenizer learns the
env families' own words, so text-game prompts and commands cost fewer tokens; the `words` size's
holds each game word whole, as a sentence and a belief claim write it."""

from __future__ import annotations

from transformers import AutoTokenizer

from benchmark.consultants.tiny import SIZES, family_vocabularies, train_tokenizer
from benchmark.envs.family import get_family
from benchmark.vocabulary import LABELS

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


BELIEF = (
    "<belief_state>\n- the agent is in the kitchenette [confirmed]\n- the fridge is open "
    "[almost certain]\n- the paper towel is on the bench [probable]\n</belief_state>"
)


def test_the_words_size_holds_every_game_word_whole(tiny_model):
    words = train_tokenizer(SIZES["words"]["corpus"], SIZES["words"]["vocab_size"])
    single = sorted({w for line in get_family("textworld").vocabulary().splitlines()
                     for w in line.split() if w.isalpha() and w.islower()})  # fmt: skip
    assert len(single) > 1000
    for word in single:  # inside a sentence, and capitalised as a room's title
        assert len(words.tokenize(" " + word)) == 1, word
        assert len(words.tokenize(" " + word.capitalize())) == 1, word
    for label in LABELS:  # a claim's label: the bracket, the label's words, the bracket
        assert len(words.tokenize(f" [{label}]")) == 2 + len(label.split()), label
    text = AutoTokenizer.from_pretrained(tiny_model("text"))  # the built model's, shared
    for sample in (GAME_TEXT, BELIEF):
        assert words.decode(words(sample).input_ids) == sample  # byte-level: lossless
        assert len(words(sample).input_ids) < 0.8 * len(text(sample).input_ids), sample
    assert len(text.tokenize(" kitchenette")) > 1  # what `text` spells in pieces
    assert SIZES["words"]["hidden_size"] == SIZES["text"]["hidden_size"]
