"""Puts this package's conf/ on Hydra's search path, so `env=toy_empty5` is found."""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class ToyFamilySearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider="benchmark-toyfamily", path="pkg://benchmark_toyfamily.conf")
