"""Find-or-make a fine-tuned consultant, cached by a hash of everything that made it.

`<models>/<env>-<prompt>-<base>-<hash>/` is a plain Hugging Face model directory (config,
safetensors, tokenizer with its chat template) plus `finetune.json` (the recipe, the training
statistics, the held-out measurement) and `dataset.jsonl` (the examples it was trained on),
written in a private directory beside it and renamed into place, then marked by a `COMPLETE`
file (the directory's fingerprint) written last, once across processes
(`benchmark.store.build_once`); a directory whose files no longer match `COMPLETE` is set aside
and made again.

The hash covers the base model's weights identity, the env config, the prompt config and the
prompt code's version, the PPO checkpoint's SHA-256 (the states come from it), the data, training
and held-out settings, the seed and FINETUNE_VERSION. Locations (the results root, the base
model's directory) never enter it."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from benchmark import config
from benchmark.consultants import Decoding
from benchmark.consultants.fingerprint import MARKER, marker_holds
from benchmark.envs.base import env_identity
from benchmark.finetune.dataset import (
    AUTOPILOT_MODES,
    Example,
    MultiRoundConsultation,
    collect,
    parse,
)
from benchmark.finetune.settings import settings_mapping
from benchmark.finetune.train import TrainSettings, fine_tune
from benchmark.seeds import TUNING_SPLIT, Splits, dataset_seeds
from benchmark.settings import FINETUNED, identity_of
from benchmark.store import write_json_atomic

log = logging.getLogger(__name__)

# Part of every fine-tuned model's key: bump it with any change here, in dataset.py or train.py
# that changes the weights a recipe trains to, so no model of older code is reused.
FINETUNE_VERSION = 2  # 2: float32 master weights under bfloat16 autocast (was pure bfloat16)
INFO = "finetune.json"
DATASET = "dataset.jsonl"


@dataclass(frozen=True)
class DataSettings:
    """`slm.backend.data`: which states become examples."""

    episodes: int = 200  # training seeds (all >= TRAIN_SEED_MIN) PPO plays
    autopilot: tuple[str, ...] = AUTOPILOT_MODES  # ppo: ASK format; none: SLM-only format
    tau: float | None = None  # only the steps the entropy gate sends at this tau (None: all)
    mc_samples: int = 20  # MC-dropout passes for `tau`
    unique: bool = True  # a state once per episode (its first visit)
    max_examples: int | None = None  # a seeded random subset of at most this many

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> DataSettings:
        cfg = settings_mapping(cls, cfg, "data")
        if "autopilot" in cfg:
            cfg["autopilot"] = tuple(cfg["autopilot"])
        out = cls(**cfg)
        if out.episodes < 1:
            raise ValueError(f"slm.backend.data.episodes={out.episodes} must be >= 1")
        if out.max_examples is not None and out.max_examples < 1:
            raise ValueError(f"slm.backend.data.max_examples={out.max_examples} must be >= 1")
        return out


@dataclass(frozen=True)
class Recipe:
    """Everything a fine-tuned model is made of, and where its inputs lie (`locations`: the
    results root's `paths`, the `policy` config whose checkpoint plays, a local copy of the base
    model; never part of the key)."""

    base: str  # conf/slm/<base>.yaml: the model fine-tuned (an hf or tiny backend)
    env: dict[str, Any]
    prompt: dict[str, Any]
    splits: dict[str, Any]
    data: DataSettings
    train: TrainSettings
    held_out_episodes: int = 50
    seed: int = 0
    locations: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_backend(
        cls,
        base: str,
        path: Any,
        env: Any,
        prompt: Any,
        splits: Any,
        data: Any = None,
        train: Any = None,
        held_out: Any = None,
        seed: int = 0,
    ) -> Recipe:
        path = plain(path)
        if not isinstance(path, dict) or "paths" not in path:
            raise ValueError(
                "slm.backend.path of a fine-tuned consultant is the mapping of "
                "conf/slm/finetuned.yaml (paths, policy, base); with +experiment=finetune choose "
                "the model to fine-tune with slm.base=<conf/slm option>, not slm=<option>"
            )
        held = dict(plain(held_out) or {})
        return cls(
            base=str(base),
            env=plain(env),
            prompt=plain(prompt),
            splits=plain(splits) or {},
            data=DataSettings.from_config(plain(data)),
            train=TrainSettings.from_config(plain(train)),
            held_out_episodes=int(held.get("episodes", 50)),
            seed=int(seed),
            locations=path,
        )

    # ------------------------------------------------------------------------- inputs
    def base_backend(self) -> dict[str, Any]:
        """The base's `slm.backend`, resolved against this job's paths; `locations.base` (a
        local copy of its weights) replaces its `path`."""
        file = config.option_file("slm", self.base)
        if not file.is_file():
            raise ValueError(
                f"slm.base={self.base!r} is not a conf/slm option: allowed {config.options('slm')}"
            )
        root = OmegaConf.create(
            {"paths": self.locations["paths"], "seed": self.seed, "slm": OmegaConf.load(file)}
        )
        backend = OmegaConf.to_container(root.slm.backend, resolve=True)
        if self.base == "finetuned" or "FinetunedConsultant" in str(backend.get("_target_")):
            raise ValueError("slm.base must name a model, not the fine-tuned consultant itself")
        if self.locations.get("base"):
            backend["path"] = str(self.locations["base"])
        return backend

    def base_source(self, make: bool = True) -> tuple[str, dict[str, Any], str]:
        """(what from_pretrained loads, its keyword arguments, the base's weights identity);
        a tiny base is built first (`make`), else `ModelNotBuilt` while it is not there."""
        from hydra.utils import get_class

        from benchmark.consultants import backend as backend_named
        from benchmark.consultants.fingerprint import resolve_source

        backend = self.base_backend()
        target = get_class(backend.pop("_target_"))
        if not (isinstance(target, type) and issubclass(target, backend_named("hf"))):
            raise ValueError(
                f"slm.base={self.base!r} is served by {target.__name__}: only models loaded "
                "through transformers (the hf and tiny backends) can be fine-tuned"
            )
        if make:
            target.make_weights(**backend)  # builds a tiny base
        identity = target.weights_identity(**backend)
        source, local_only, _ = resolve_source(
            backend.get("model"), backend.get("path"), backend.get("revision")
        )
        kwargs = {
            "revision": backend.get("revision"),
            "local_files_only": local_only,
            "trust_remote_code": bool(backend.get("trust_remote_code", False)),
        }
        return source, kwargs, str(identity)

    def job_config(self) -> DictConfig:
        """The slice of a job config that finds (or trains) the PPO checkpoint."""
        from benchmark.build import normalize_checkpoint

        cfg = OmegaConf.create(
            {
                "env": self.env,
                "policy": plain(self.locations.get("policy")),
                "paths": self.locations["paths"],
            }
        )
        normalize_checkpoint(cfg)
        return cfg

    def task(self) -> Any:
        from benchmark.envs import make_task

        return make_task(self.env)

    def prompt_variant(self, task: Any) -> Any:
        from hydra.utils import instantiate

        prompt = instantiate(OmegaConf.create(self.prompt))
        prompt.check(task)
        return prompt

    def policy_checkpoint(self, task: Any, train: bool = True) -> Path | None:
        """The PPO checkpoint whose states it learns from (None: not trained, and `train` is
        False)."""
        from benchmark.build import policy_checkpoint

        if not self.locations.get("policy"):
            raise ValueError("slm.backend.path.policy is missing: the PPO whose states are used")
        return policy_checkpoint(
            self.job_config(), task, Splits.from_config(self.splits), train=train
        )

    # ------------------------------------------------------------------------- key
    def key(self, base_identity: str, checkpoint_sha256: str) -> dict[str, Any]:
        from benchmark.envs import get_family

        if not self.env.get("family"):
            raise ValueError(f"env {self.env.get('name')!r} of the fine-tuning names no `family`")
        # its env family's prompt texts made the data: their version, not other families'
        prompt_version = get_family(str(self.env["family"])).prompt_version
        return {
            "finetune_version": FINETUNE_VERSION,
            "base": {"name": self.base, "weights": base_identity},
            "env": env_identity(self.env),
            "prompt": _trained_prompt(self.prompt),
            "prompt_version": prompt_version,
            "policy": {"checkpoint_sha256": checkpoint_sha256},
            "data": asdict(self.data),
            "train": asdict(self.train),
            "held_out": {
                "split": Splits.from_config(self.splits).bounds(TUNING_SPLIT),
                "episodes": self.held_out_episodes,
            },
            "seed": self.seed,
        }

    def dir_name(self, key: dict[str, Any]) -> str:
        blob = json.dumps(key, sort_keys=True, separators=(",", ":"), default=str)
        digest = hashlib.sha256(blob.encode()).hexdigest()[:10]
        rationale = "+r" if self.prompt.get("rationale") else ""
        env = self.env.get("name", "env")
        return f"{env}-{self.prompt.get('name', 'prompt')}{rationale}-{self.base}-{digest}"

    def digests(self) -> Path:
        """The results store's digest cache (benchmark.store.cached_digest)."""
        from benchmark.store import Store

        return Store.of(self.locations["paths"]).digests_dir()

    def models_dir(self) -> Path:
        from benchmark.store import Store

        return Store.of(self.locations["paths"]).models_dir("finetuned")


def plain(value: Any) -> Any:
    """A resolved plain container from a DictConfig/ListConfig (instantiate may pass either)."""
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True)
    return value


# ----------------------------------------------------------------------------- the cache
def intact(model_dir: Path, digests: Path | None = None) -> bool:
    """Complete (marker written last) and its files still those the marker fingerprinted (an
    earlier release's marker is brought up to date once per results root: benchmark.migrate)."""
    try:
        marker = json.loads((model_dir / MARKER).read_text())
    except (FileNotFoundError, json.JSONDecodeError, NotADirectoryError):
        return False
    return isinstance(marker, dict) and marker_holds(model_dir, marker, digests)


def find(recipe: Recipe, digests: Path | None = None) -> Path:
    """The complete fine-tuned model directory of `recipe`, found by its key without making
    anything; `ModelNotBuilt` when it (or what its key needs: the base model, the PPO
    checkpoint) is not made yet."""
    from benchmark.consultants import ModelNotBuilt
    from benchmark.store import file_sha256

    checkpoint = recipe.policy_checkpoint(recipe.task(), train=False)
    if checkpoint is None:
        raise ModelNotBuilt("fine-tuned model not made yet (its PPO policy is not trained)")
    try:
        base_identity = recipe.base_source(make=False)[2]
    except ModelNotBuilt as exc:
        raise ModelNotBuilt(f"fine-tuned model not made yet (its base: {exc})") from exc
    target = recipe.models_dir() / recipe.dir_name(
        recipe.key(base_identity, file_sha256(checkpoint))
    )
    if not intact(target, digests):
        raise ModelNotBuilt(f"fine-tuned model not made yet ({target.name})")
    return target


def ensure(recipe: Recipe) -> Path:
    """The complete fine-tuned model directory of `recipe`, made first if needed (once across
    processes). The PPO checkpoint it needs is found, or trained, like any job's."""
    from benchmark.store import build_once, file_sha256

    task = recipe.task()
    prompt = recipe.prompt_variant(task)  # a prompt that does not fit the env fails first
    checkpoint = recipe.policy_checkpoint(task)
    base_source, base_kwargs, base_identity = recipe.base_source()
    key = recipe.key(base_identity, file_sha256(checkpoint))
    target = recipe.models_dir() / recipe.dir_name(key)

    def make(work: Path) -> None:
        _make(recipe, key, task, prompt, checkpoint, base_source, base_kwargs, work)

    def mark(model_dir: Path) -> None:  # the fingerprint of what was renamed into place, last
        from benchmark.consultants.fingerprint import marker

        write_json_atomic(
            model_dir / MARKER, {**marker(model_dir, recipe.digests()), "pid": os.getpid()}
        )

    build_once(target, make, lambda d: intact(d, recipe.digests()), finish=mark)
    return target


def _make(
    recipe: Recipe,
    key: dict[str, Any],
    task: Any,
    prompt: Any,
    checkpoint: Path,
    base_source: str,
    base_kwargs: dict[str, Any],
    out: Path,
) -> None:
    from benchmark.policy import load

    splits = Splits.from_config(recipe.splits)
    policy = load(checkpoint, task=task).policy
    data = recipe.data
    start = time.perf_counter()
    examples = collect(
        task,
        prompt,
        policy,
        dataset_seeds(data.episodes, recipe.seed, splits),
        splits=splits,
        tau=data.tau,
        mc_samples=data.mc_samples,
        autopilot=data.autopilot,
        unique=data.unique,
    )
    if not examples:
        raise ValueError(
            f"no fine-tuning example: PPO's {data.episodes} training episodes had no step the "
            f"gate sends at tau={data.tau}; lower slm.backend.data.tau"
        )
    collected = len(examples)
    if data.max_examples is not None and len(examples) > data.max_examples:
        examples = random.Random(recipe.seed).sample(examples, data.max_examples)
    data_seconds = time.perf_counter() - start
    log.info(
        "fine-tuning %s on %d examples (%d collected from %d training episodes of %s, prompt %s)",
        recipe.base,
        len(examples),
        collected,
        data.episodes,
        recipe.env.get("name"),
        recipe.prompt.get("name"),
    )
    stats = fine_tune(
        base_source, examples, out, recipe.train, seed=recipe.seed, load_kwargs=base_kwargs
    )
    held = held_out(recipe, task, prompt, policy, out, splits)
    info = {
        "recipe": key,
        "checkpoint": str(checkpoint),
        "data": {
            "collected": collected,
            "examples": len(examples),
            "seconds": round(data_seconds, 2),
            "labels": dict(Counter(e.expert for e in examples)),
        },
        "train": stats,
        "held_out": held,
    }
    write_json_atomic(out / INFO, info)
    with (out / DATASET).open("w") as fh:
        for e in examples:
            fh.write(json.dumps(e.record(), sort_keys=True) + "\n")
    if "invalid_rate" not in held:  # no held-out state, or a prompt one answer cannot score
        log.info(
            "fine-tuned %s in %.0f s (data %.0f s): held-out not measured (%s)",
            recipe.base,
            stats["train_seconds"],
            data_seconds,
            held.get("not_measured", "no held-out validation state"),
        )
        return
    log.info(
        "fine-tuned %s in %.0f s (data %.0f s): on %d held-out validation states invalid %.3f, "
        "expert agreement %.3f (uniform chance %.3f, majority label %.3f, PPO %.3f)",
        recipe.base,
        stats["train_seconds"],
        data_seconds,
        held["states"],
        held["invalid_rate"],
        held["agreement"],
        held["chance"],
        held["majority"],
        held["ppo_agreement"] if held["ppo_agreement"] is not None else float("nan"),
    )


def held_out(
    recipe: Recipe, task: Any, prompt: Any, policy: Any, model_dir: Path, splits: Splits
) -> dict[str, Any]:
    """The fine-tuned model on the states PPO visits on the first validation seeds (never
    trained on): its answers parsed exactly as in an evaluation."""
    seeds = splits.seeds(TUNING_SPLIT, min(recipe.held_out_episodes, splits.size(TUNING_SPLIT)))
    examples = collect(
        task,
        prompt,
        policy,
        seeds,
        splits=splits,
        autopilot=recipe.data.autopilot,
        unique=recipe.data.unique,
        split_ok=True,
    )
    return measure(model_dir, examples)


def answer_all(model_dir: Path, items: Sequence[Any]) -> tuple[list[Any], float]:
    """A model's answers to held-out items (each with `messages`, `actions`, `decoding`), asked
    as a cell asks them through the hf backend, and the seconds they took. The weights' own
    dtype on a GPU, float32 on a CPU (the hf backend's `auto`)."""
    from benchmark.consultants import Query, backend

    consultant = backend("hf")(path=str(model_dir), dtype="auto", device_map="auto")
    try:
        queries = [Query(i.messages, i.actions, lambda a, r: a, i.decoding) for i in items]
        start = time.perf_counter()
        answers = consultant.answer(queries)
        return answers, time.perf_counter() - start
    finally:
        consultant.close()


def measure(model_dir: Path, examples: list[Example]) -> dict[str, Any]:
    """Invalid rate and agreement with the expert (its action; the set of optimal actions) of
    the model at `model_dir` on held-out examples, per autopilot mode too, with the baselines a
    guess would reach: uniform chance, always the most frequent label, PPO's own action."""

    if not examples:
        return {"states": 0}
    answers, seconds = answer_all(model_dir, examples)
    try:
        chosen = [parse(e, a.text) for e, a in zip(examples, answers, strict=True)]
    except MultiRoundConsultation as err:  # not a wrong answer: nothing to score it by here
        return {
            "states": len(examples),
            "not_measured": f"{err}: a multi-round prompt's action follows the model's own "
            "first-round answer; prompt=brace is measured by benchmark.brace.train (held_out)",
        }

    def rates(pairs: list[tuple[int | None, Example]]) -> dict[str, Any]:
        n = len(pairs)
        if not n:
            return {"states": 0}
        labels = Counter(e.expert for _, e in pairs)
        with_ppo = [e for _, e in pairs if e.ppo is not None]
        return {
            "states": n,
            "invalid_rate": sum(a is None for a, _ in pairs) / n,
            "agreement": sum(a is not None and e.actions[a] == e.expert for a, e in pairs) / n,
            "optimal_rate": sum(
                a is not None and e.actions[a] in (e.optimal or (e.expert,)) for a, e in pairs
            )
            / n,
            "chance": sum(1 / len(e.actions) for _, e in pairs) / n,
            "majority": labels.most_common(1)[0][1] / n,
            "ppo_agreement": (
                sum(e.ppo == e.expert for e in with_ppo) / len(with_ppo) if with_ppo else None
            ),
        }

    pairs = list(zip(chosen, examples, strict=True))
    out = rates(pairs)
    out["by_autopilot"] = {
        mode: rates([(a, e) for a, e in pairs if (e.ppo is None) == (mode == "none")])
        for mode in AUTOPILOT_MODES
    }
    out["seconds"] = round(seconds, 2)
    out["examples"] = [
        {"seed": e.seed, "step": e.step, "expert": e.expert, "ppo": e.ppo, "answer": a.text}
        for e, a in list(zip(examples, answers, strict=True))[:20]
    ]
    return out


def read_info(model_dir: str | Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(model_dir) / INFO).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _trained_prompt(prompt: dict[str, Any]) -> dict[str, Any]:
    """The prompt config as a fine-tuned model's key holds it: its sampling as Decoding declares
    it for that key (how the model is asked does not change what it is trained on)."""
    sampling = prompt.get("sampling")
    if not isinstance(sampling, dict):
        return prompt
    return {**prompt, "sampling": identity_of(Decoding, sampling, FINETUNED)}
