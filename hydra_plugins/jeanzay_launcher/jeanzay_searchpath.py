"""Cluster profiles outside the package: Hydra also searches the user's config folder.

`jzk cluster discover` writes `<user config>/cluster/<name>.yaml`, where <user config> is
$JZK_CONFIG_HOME, else $XDG_CONFIG_HOME/jeanzay_kit, else ~/.config/jeanzay_kit. With this
plugin `cluster=<name>` finds it from `python train.py`, `jzk validate` and `jzk render`
alike; the package's conf/ still wins for the names it has.
"""

# No `from __future__ import annotations`: Hydra loads plugin modules outside sys.modules.
import os

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

from jeanzay_kit.config.compose import user_config_dir


class JeanzayUserProfiles(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(
            provider="jeanzay_kit-user", path=f"file://{user_config_dir(os.environ)}"
        )
