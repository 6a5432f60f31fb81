"""The files `jzk init DIR` writes: a project that `jzk train` trains out of the box.

Pure: returns {relative path: text}; cli/init.py writes them. The project is a package
of the user's own (a model and a dataset in a few lines each), its configs in conf/
(found before the shipped ones), a .gitignore for what runs write, and a README.
"""

from __future__ import annotations

import keyword
import re

_NOT_IDENT = re.compile(r"[^0-9a-zA-Z_]+")


def package_name(directory_name: str) -> str:
    """A Python package name from the project folder's name (`my-proj` -> `my_proj`)."""
    name = _NOT_IDENT.sub("_", directory_name).strip("_").lower() or "project"
    if name[0].isdigit() or keyword.iskeyword(name):
        name = f"p_{name}"
    return name


def skeleton_files(directory_name: str) -> dict[str, str]:
    pkg = package_name(directory_name)
    return {
        "README.md": _README.format(pkg=pkg, name=directory_name),
        ".gitignore": _GITIGNORE,
        "conf/config.yaml": _CONFIG.format(pkg=pkg),
        "conf/model/net.yaml": _MODEL_YAML.format(pkg=pkg),
        "conf/data/points.yaml": _DATA_YAML.format(pkg=pkg),
        f"{pkg}/__init__.py": f'"""{directory_name}: a model and data for jeanzay_kit."""\n',
        f"{pkg}/model.py": _MODEL_PY,
        f"{pkg}/data.py": _DATA_PY,
    }


_GITIGNORE = """\
# What runs write (jzk train, jzk submit, sweeps)
outputs/
multirun/
logs/
__pycache__/
"""

_CONFIG = """\
# This project's root config: the toolkit's defaults, then what this project changes.
# conf/ here is searched before the shipped configs: conf/<group>/<name>.yaml adds an
# option (model=..., data=..., cluster=...), or replaces a shipped one of the same name.
defaults:
  - jeanzay_kit  # every toolkit default: `jzk train --cfg job` shows them all
  - override model: net
  - override data: points
  - override loss: criterion
  - _self_

job:
  name: {pkg}

# The loss: criterion(output, target) with any torch.nn loss (docs/your-model-and-data.md).
loss:
  criterion:
    _target_: torch.nn.MSELoss
"""

_MODEL_YAML = """\
# The model: hydra.utils.instantiate builds {pkg}.model.Net with these arguments.
_target_: {pkg}.model.Net
in_dim: ${{data.in_dim}}
hidden: 64
"""

_DATA_YAML = """\
# The data: {pkg}.data.NoisyPoints(size, in_dim, seed).
_target_: {pkg}.data.NoisyPoints
size: 4096
in_dim: 16
seed: 0
"""

_MODEL_PY = '''\
"""The model: any torch.nn.Module (its loss is conf/config.yaml's loss.criterion)."""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, in_dim: int = 16, hidden: int = 64):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.GELU(), nn.Linear(hidden, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)
'''

_DATA_PY = '''\
"""The data: a map-style torch Dataset; each sample is (inputs, target)."""

import torch
from torch.utils.data import Dataset


class NoisyPoints(Dataset):
    """y = sin(x . w) + noise, drawn once from a seed: the same on every rank."""

    def __init__(self, size: int = 4096, in_dim: int = 16, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(size, in_dim, generator=g)
        w = torch.randn(in_dim, 1, generator=g) / in_dim**0.5
        self.y = torch.sin(self.x @ w) + 0.01 * torch.randn(size, 1, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]
'''

_README = """\
# {name}

A project trained with [jeanzay_kit](https://pypi.org/project/jeanzay_kit/): the model is
`{pkg}/model.py`, the data `{pkg}/data.py`, their settings `conf/model/net.yaml` and
`conf/data/points.yaml`.

```bash
jzk train                                   # train here (outputs/{pkg}-<hash>/)
jzk train model.hidden=128 train.steps=500  # change any setting on the command line
jzk train --cfg job                         # every setting, resolved
jzk validate cluster=jeanzay_h100 cluster.account=abc@h100 resources.gpus_per_node=4
jzk render cluster=jeanzay_h100 cluster.account=abc@h100 -o scripts/   # an sbatch file
jzk submit cluster=jeanzay_h100 cluster.account=abc@h100                # submit it
jzk train -m cluster=jeanzay_h100 cluster.account=abc@h100 optim.lr=1e-3,3e-4  # a sweep
jzk status                                  # where every submitted run stands
```

Jobs run the code as it was when submitted: `jzk submit`, `jzk render` and sweeps copy the
project's files (git-tracked and untracked-but-not-ignored ones) into `logs/code/`, and
every run directory records the git commit, the uncommitted diff and the packages
(`provenance/`). Add your own cluster profile as `conf/cluster/<name>.yaml`
(`jzk cluster discover` writes one).
"""
