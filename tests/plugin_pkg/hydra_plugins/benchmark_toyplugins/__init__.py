"""Puts this package's conf/ on Hydra's search path, so `slm=toy` and `gate=period` are found."""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class ToyPluginsSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider="benchmark-toyplugins", path="pkg://benchmark_toyplugins.conf")
