"""benchmark.finetune.store: a fine-tuned model's key, its prompt's sampling as Decoding declares
it for that key (how the model is asked is no part of it), pinned so that no model trained
before is made again."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from benchmark.finetune.store import Recipe
from tests.finetune.test_finetune import finetuned_cfg

RECIPE = ("base", "path", "env", "prompt", "splits", "data", "train", "held_out", "seed")
# the folder each recipe's model was made in (base weights "w", PPO checkpoint "sha"), by the
# code before the decoding keys declared their role in it
GOLDEN = {
    (): "empty5x5_random-basic-tiny_small-0d659741b2",
    ("prompt.rationale=true",): "empty5x5_random-basic+r-tiny_small-90c3863e60",
    ("slm.decoding.repetition_penalty=1.2",): "empty5x5_random-basic-tiny_small-9c56e98efc",
    # how the model is asked: the same model
    ("slm.decoding.mode=choices", "slm.decoding.choice_score=mean"): (
        "empty5x5_random-basic-tiny_small-0d659741b2"
    ),
}


def recipe(tmp_path, *overrides: str) -> Recipe:
    backend = OmegaConf.to_container(finetuned_cfg(tmp_path, *overrides).slm.backend, resolve=True)
    return Recipe.from_backend(**{k: backend[k] for k in RECIPE if k in backend})


@pytest.mark.parametrize("overrides", sorted(GOLDEN))
def test_a_recipes_model_folder_is_the_one_it_was_made_in(tmp_path, overrides):
    r = recipe(tmp_path, *overrides)
    assert r.dir_name(r.key("w", "sha")) == GOLDEN[overrides]


def test_the_key_keeps_every_sampling_value_but_how_the_model_is_asked(tmp_path):
    sampling = recipe(tmp_path, "slm.decoding.repetition_penalty=1.0").key("w", "sha")["prompt"][
        "sampling"
    ]
    assert sampling["repetition_penalty"] == 1.0  # at its old value too: these models held it
    assert not {"mode", "source", "choice_score"} & set(sampling)
