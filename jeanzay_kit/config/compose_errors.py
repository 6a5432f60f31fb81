"""Hydra's and OmegaConf's refusals of a command line as our one line: the key, the value
given, why, and the fix (config/compose.py composes; train_app.py, the Hydra callbacks and
the sweep point resolver report through here, as `jzk validate` does).
"""

from __future__ import annotations

from collections.abc import Sequence

from jeanzay_kit.errors import ConfigError, JzkError, Problem, SpecError

# OmegaConf's words for a value of the wrong type -> ours (config/collector.py says the same).
_TYPE_REASONS = (
    ("to Integer", "is not a whole number"),
    ("to Float", "is not a number"),
    ("valid bool", "is not true or false"),
)


def compose_error(err: BaseException, overrides: Sequence[str] = ()) -> JzkError:
    """Hydra's refusal as our error that names the key: a value of the wrong type or a key
    the schema lacks becomes a Problem (`key=value reason. HINT: fix`), like every check
    of config/spec.py; anything else keeps Hydra's words."""
    # Hydra appends its search path to some messages; the user needs the first part.
    message = " ".join(str(err).split("Config search path")[0].split())
    cause: BaseException | None = err
    while cause is not None:
        full_key = getattr(cause, "full_key", None)
        reason = str(getattr(cause, "msg", "") or "").split("\n")[0]
        if full_key and reason:
            given = _given(full_key, overrides, getattr(cause, "value", None))
            return SpecError(_schema_problem(full_key, given, cause, reason))
        cause = cause.__cause__ or cause.__context__
    return ConfigError(
        f"cannot apply the overrides: {message}. HINT: overrides use Hydra's syntax, "
        "key=value (`jzk validate --help`)"
    )


def _given(full_key: str, overrides: Sequence[str], default: object) -> object:
    """The value the user wrote for a key (OmegaConf does not keep it for unknown keys)."""
    for override in overrides:
        key, sep, value = override.lstrip("+~").partition("=")
        if sep and key == full_key:
            return value
    return default


def _schema_problem(full_key: str, given: object, cause: BaseException, reason: str) -> Problem:
    schema = getattr(cause, "object_type", None)
    name = getattr(schema, "__name__", "the schema")
    if "not in" in reason:  # a key the schema does not have
        from dataclasses import fields, is_dataclass

        from jeanzay_kit.config.schema import closest

        known = [f.name for f in fields(schema)] if is_dataclass(schema) else []
        near = closest(full_key.rsplit(".", 1)[-1], known)
        parent = full_key.rsplit(".", 1)[0] + "." if "." in full_key else ""
        hint = f"did you mean {parent}{near}? " if near else ""
        return Problem(
            full_key,
            given,
            f"is not a key of {name}",
            hint
            + "jeanzay_kit/config/schema.py lists every key"
            + (
                ""
                if near
                else f"; a key of your own (your model's or data's argument) is added with "
                f"+{full_key}=VALUE, and a whole node is given as "
                f"{parent.rstrip('.') or full_key}={{key: value, ...}}"
            ),
        )
    if "Interpolation" in reason:  # resolved after composition: no schema to name
        return Problem(full_key, given, reason, "an interpolation ${a.b} names a key of the config")
    ours = next((words for theirs, words in _TYPE_REASONS if theirs in reason), None)
    return Problem(
        full_key,
        given,
        f"{ours or reason} ({name} in jeanzay_kit/config/schema.py)",
        "give a value of the type the schema states",
    )
