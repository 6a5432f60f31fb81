"""The optional extras: the module -> extra table (jeanzay_kit/extras.py) is pyproject's,
and a missing one is refused in one line naming the extra."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib

from jeanzay_kit import extras

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
# A distribution whose import name differs from its name.
DISTRIBUTION = {"mlflow": "mlflow-skinny"}


@pytest.mark.parametrize(("module", "extra"), sorted(extras.EXTRAS.items()))
def test_each_module_is_in_its_extra(module: str, extra: str) -> None:
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"][extra]
    names = {re.split(r"[<>=!~\[ ;]", item, maxsplit=1)[0].lower() for item in declared}
    assert DISTRIBUTION.get(module, module) in names


def test_a_missing_module_is_one_line_naming_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extras, "installed", lambda module: False)
    with pytest.raises(extras.MissingExtra) as caught:
        extras.require("wandb", "metrics.wandb=true")
    assert caught.value.exit_code == 2
    assert str(caught.value) == (
        "metrics.wandb=true needs wandb (the optional extra 'trackers'), which is not installed "
        "in this Python. HINT: pip install 'jeanzay_kit[trackers]'"
    )
