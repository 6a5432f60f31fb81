"""Each setting is declared once, in the schema (config/schema.py): the shipped YAML, the
settings the validation builds (config/sections.py), the session's defaults
(config/runtime_settings.py, tests/unit/test_runtime_settings.py), the launcher's
config and docs/configuration.md's tables are tested equal to it here."""

from __future__ import annotations

import re
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from jeanzay_kit.config import schema, sections
from jeanzay_kit.config.compose import compose_config

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
# Groups whose shipped option is a profile or a choice among schemas, not the defaults.
NOT_DEFAULTS = {"cluster"}


def schema_defaults() -> dict[str, Any]:
    out = {}
    for section, cls in schema._FIXED.items():
        if section in NOT_DEFAULTS:
            continue
        out.update(_flat(section, cls()))
    return out


def _flat(prefix: str, instance: Any) -> dict[str, Any]:
    """Fields as dotted keys; a nested section (job.container) as its own keys."""
    out: dict[str, Any] = {}
    for f in fields(instance):
        value = getattr(instance, f.name)
        if is_dataclass(value):
            out.update(_flat(f"{prefix}.{f.name}", value))
        else:
            out[f"{prefix}.{f.name}"] = list(value) if isinstance(value, tuple) else value
    return out


@pytest.fixture(scope="module")
def composed() -> dict[str, Any]:
    return compose_config([])


def lookup(config: dict[str, Any], key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        node = node[part]
    return node


INTERPOLATED = {"job.run_dir", "tune.study_name", "tune.dir"}


def test_the_shipped_yaml_chooses_the_schemas_defaults(composed) -> None:
    differ = {
        key: (default, lookup(composed, key))
        for key, default in schema_defaults().items()
        # Interpolations: the composed config holds their resolved values.
        if key not in INTERPOLATED and lookup(composed, key) != default
    }
    assert not differ, f"(schema, YAML) differ: {differ}"


# sections.py field -> the schema key it carries, where the names differ.
RENAMED = {"checkpoint.use_async": "checkpoint.async"}
SECTIONS = {
    "job": sections.JobSettings,
    "train": sections.TrainSettings,
    "loader": sections.LoaderSettings,
    "optim": sections.OptimSettings,
    "checkpoint": sections.CheckpointSettings,
}


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_a_validated_settings_default_is_the_schemas(section: str) -> None:
    """The few defaults sections.py states (for settings built in tests and by hand)
    are the schema's, or say nothing a user can set."""
    known = schema_defaults()
    known["optim.betas"] = list(schema.AdamWConfig().betas)
    for f in fields(SECTIONS[section]):
        if f.default is MISSING and f.default_factory is MISSING:
            continue
        if (section, f.name) == ("optim", "momentum"):
            continue  # 0.0 there means "AdamW has none", not SGD's default (0.9)
        key = RENAMED.get(f"{section}.{f.name}", f"{section}.{f.name}")
        if key not in known:
            continue  # resolved values (cpus_per_process): no config key
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        default = list(default) if isinstance(default, tuple) else default
        assert default == known[key], (key, default, known[key])


def _split_top(text: str, sep: str) -> list[str]:
    """text split on sep outside brackets and parentheses."""
    parts, depth, current = [], 0, ""
    i = 0
    while i < len(text):
        if text.startswith(sep, i) and depth == 0:
            parts.append(current)
            current, i = "", i + len(sep)
            continue
        depth += {"[": 1, "{": 1, "(": 1, "]": -1, "}": -1, ")": -1}.get(text[i], 0)
        current += text[i]
        i += 1
    return [*parts, current]


def doc_defaults() -> list[tuple[str, str]]:
    """(key, default as the docs write it) of every row of a table with a default column."""
    rows: list[tuple[str, str]] = []
    header: list[str] | None = None
    for line in DOC.read_text().splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if set(cells[0]) <= {"-", " "} or "default" not in header:
            continue
        sep = " / " if " / " in cells[0] else ", "
        keys = [k.strip().strip("`") for k in cells[0].split(sep)]
        values = _split_top(cells[header.index("default")], sep)
        if len(values) != len(keys):
            values = [values[0]] * len(keys) if len(keys) == 1 else values
        rows += list(zip(keys, values, strict=True))
    return rows


def as_value(written: str) -> Any:
    """The docs' spelling of a default as a value: `null`, 3, [0.9, 0.95], "01:00:00"."""
    first = written.split(" (")[0].strip().strip("`").strip('"')
    try:
        return yaml.safe_load(first)
    except yaml.YAMLError:  # [**/*.py, ...]: globs YAML reads as aliases
        return [w.strip() for w in first.strip("[]").split(",")]


def test_the_configuration_docs_state_the_schemas_defaults(composed) -> None:
    rows = doc_defaults()
    assert len(rows) > 50, "the parser lost the tables"
    known = schema_defaults()
    # optim=adamw is the shipped option; SGD's own keys (optim.momentum) from its schema.
    known.update({f"optim.{f.name}": f.default for f in fields(schema.SGDConfig)})
    known.update({f"optim.{k}": v for k, v in composed["optim"].items()})
    launcher = {
        f"hydra.launcher.{f.name}": f.default
        for f in fields(
            __import__(
                "hydra_plugins.jeanzay_launcher.jeanzay_launcher", fromlist=["x"]
            ).JeanzayLauncherConf
        )
    }
    wrong = []
    for key, written in rows:
        if written.strip() in ("-", ""):
            continue  # no default: the user gives it
        if key in launcher:
            expected = launcher[key]
        elif key in known:
            expected = known[key]
        else:
            try:
                expected = lookup(composed, key)  # optim.*, loss.*: the shipped option
            except (KeyError, TypeError):
                wrong.append(f"{key}: not a key of the config")
                continue
        value = as_value(written)
        if key == "job.run_dir" or key.endswith("submitit_folder"):
            value = str(value)
        if value != expected and not (isinstance(value, (int, float)) and value == expected):
            wrong.append(f"{key}: docs say {written!r}, the schema {expected!r}")
    assert not wrong, "\n".join(wrong)


def test_the_rules_take_a_missing_keys_default_from_the_schema() -> None:
    """No rule restates a default: `.get("key", <literal>)` over a config section."""
    package = Path(schema.__file__).resolve().parents[1]
    restated = []
    for path in sorted((package / "config").glob("*_rules.py")) + [package / "cli" / "validate.py"]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\.get\(\"[a-z_]+\", (\"auto\"|\"min\"|\"max\"|True|False|\d)", line):
                restated.append(f"{path.name}:{number}: {line.strip()}")
    assert not restated, "\n".join(restated)
