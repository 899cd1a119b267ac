"""The TextWorld family (`textworld`): Quest, Treasure and Cooking text games, generated offline
from fixed seeds (games.py), played through a fixed, masked command space (task.py), with the
ASK/ASK+ prompt blocks (text.py). The env configs are conf/env/tw_*.yaml; docs/families.md."""

from benchmark.envs.textworld.task import TextWorldEpisode, TextWorldTask
from benchmark.envs.textworld.text import TextWorldFamily

__all__ = ["FAMILY", "TextWorldEpisode", "TextWorldFamily", "TextWorldTask"]

FAMILY = TextWorldFamily()
