"""Reference benchmark suite for uncertainty-gated language-model assistance in RL (ASK / ASK+)."""

import os
import uuid

from omegaconf import OmegaConf

# Config resolvers, registered on import so every entry point (CLI, compose API, report) has them.
# uid: a short unique suffix so two sweeps started in the same second never share a directory.
if not OmegaConf.has_resolver("uid"):
    OmegaConf.register_new_resolver("uid", lambda: uuid.uuid4().hex[:6], use_cache=True)
# abspath: paths.root is made absolute once, so SLURM jobs and subprocesses agree on it.
if not OmegaConf.has_resolver("abspath"):
    OmegaConf.register_new_resolver("abspath", lambda p: os.path.abspath(os.path.expanduser(p)))
# recipe: a key of the chosen PPO training recipe (policy.recipe; benchmark/recipes.py).
if not OmegaConf.has_resolver("recipe"):
    from benchmark.recipes import recipe_value

    OmegaConf.register_new_resolver("recipe", recipe_value)
