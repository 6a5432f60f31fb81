"""The project's and the user's configs come before the shipped ones.

Hydra searches, first match wins: the project's `conf/` (the directory `jzk` or
`train.py` runs in), the user's folder ($JZK_CONFIG_HOME, else
~/.config/jeanzay_kit: profiles from `jzk cluster discover`), then the package's
`pkg://jeanzay_kit.conf`. With this plugin `cluster=<name>`, `model=<name>` and any other
group option of the project are found by `jzk train`, `jzk validate` and `jzk render`
alike (jeanzay_kit/config/compose.py, config_roots).
"""

# No `from __future__ import annotations`: Hydra loads plugin modules outside sys.modules.
import os
from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

from jeanzay_kit.config.compose import config_roots


class JeanzayConfigRoots(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        # The project's root is left out when its conf/ is a Hydra app's own
        # (config/compose.py is_app_conf).
        roots = {root.origin: root for root in config_roots(os.environ, Path.cwd())}
        # prepend puts each first: the project ends up before the user's folder.
        for origin in ("user", "project"):
            if origin in roots:
                path = roots[origin].path
                search_path.prepend(provider=f"jeanzay_kit-{origin}", path=f"file://{path}")
