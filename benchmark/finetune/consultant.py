"""`slm=finetuned`: the hf backend on a model fine-tuned for this env and prompt variant, made on
first use (benchmark.finetune.store) and found in the cache afterwards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmark.consultants import ConsultantError, ModelNotBuilt, backend
from benchmark.consultants.fingerprint import local_fingerprint
from benchmark.finetune.store import Recipe, ensure, find, plain

RECIPE_ARGS = ("base", "path", "env", "prompt", "splits", "data", "train", "held_out", "seed")


def _recipe(args: dict[str, Any]) -> Recipe:
    missing = [k for k in ("base", "env", "prompt", "splits") if k not in args]
    if missing or not isinstance(plain(args.get("path")), dict):
        raise ConsultantError(
            "slm.backend of a fine-tuned consultant is conf/slm/finetuned.yaml's (base, env, "
            "prompt, splits and the `path` mapping); with +experiment=finetune choose the model "
            "to fine-tune with slm.base=<conf/slm option>, not slm=<option>"
        )
    try:
        return Recipe.from_backend(**{k: args[k] for k in RECIPE_ARGS if k in args})
    except (TypeError, ValueError) as exc:
        raise ConsultantError(f"slm=finetuned: {exc}") from exc


class FinetunedConsultant(backend("hf")):  # type: ignore[misc]
    """The hf backend on the fine-tuned model of a recipe (conf/slm/finetuned.yaml: `base`, the
    data and training settings, the env and prompt it serves; `path` says where things lie)."""

    protocol_fields = ()  # trained in its own dtype (slm.backend.train.dtype)
    slm_keys = ("base",)  # conf/slm/finetuned.yaml: the base model's option name

    @classmethod
    def config_keys(cls) -> frozenset[str]:
        """The hf backend's keys and the recipe's (taken from `**kwargs`)."""
        return super().config_keys() | frozenset(RECIPE_ARGS)

    def __init__(
        self, base: str, path: Any, env: Any, prompt: Any, splits: Any = None, **kwargs: Any
    ) -> None:
        """`kwargs`: the rest of the recipe (data, train, held_out, seed) and the hf backend's
        own settings."""
        rest = {k: kwargs.pop(k) for k in RECIPE_ARGS if k in kwargs}
        recipe = _recipe(dict(base=base, path=path, env=env, prompt=prompt, splits=splits, **rest))
        self.model_dir = ensure(recipe)
        kwargs.setdefault("digests", recipe.digests())
        kwargs.setdefault("dtype", "float32")
        kwargs.setdefault("device_map", "cpu")
        super().__init__(model=None, path=str(self.model_dir), **kwargs)

    @classmethod
    def weights_identity(cls, **backend_args: object) -> str | None:
        """The fingerprint of the fine-tuned model's files, found by its recipe's key; raises
        `ModelNotBuilt` when it (or the base model, or the PPO policy whose states it learns
        from) is not made yet: never trains."""
        recipe = _recipe(dict(backend_args))
        digests = backend_args.get("digests") or recipe.digests()
        model_dir = find(recipe, digests)
        return "hf-local:" + local_fingerprint(model_dir, digests)

    @classmethod
    def local_dir(cls, **backend_args: object) -> Path | None:
        try:
            return find(_recipe(dict(backend_args)))
        except ModelNotBuilt:
            return None

    @classmethod
    def make_weights(cls, **backend_args: object) -> None:
        """Fine-tune (minutes the first time, as the PPO checkpoint a job trains)."""
        ensure(_recipe(dict(backend_args)))
