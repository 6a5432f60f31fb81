"""The script's arguments as users type them: `jzk train|submit|render [OVERRIDES] -- ARGS`.

Pure. Everything after the first `--` is the script's, verbatim: it becomes one Hydra
override, `job.args=[...]`, with every item quoted the way Hydra's override parser reads
it back (tests/unit/test_command_line.py round-trips a table of arguments through it),
so `=`, spaces, commas, brackets, quotes, backslashes and `$` reach the script unchanged.
`${...}` stays OmegaConf's interpolation, as in any value: `'--out_dir=${job.run_dir}'`
(quoted for the shell) gives the script its run directory.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from jeanzay_kit.errors import JzkError

SEPARATOR = "--"
# Hydra unescapes a run of backslashes only before a quote or at the end of a quoted
# value; elsewhere they are kept as written.
_BACKSLASHES_BEFORE_QUOTE = re.compile(r"(\\*)('|$)")


def split_script_args(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """(the toolkit's part, the script's arguments or None without `--`)."""
    argv = list(argv)
    if SEPARATOR not in argv:
        return argv, None
    at = argv.index(SEPARATOR)
    return argv[:at], argv[at + 1 :]


def hydra_quote(value: str) -> str:
    """`value` as one single-quoted item of Hydra's override grammar."""

    def escape(match: re.Match[str]) -> str:
        slashes, quote = match.group(1), match.group(2)
        return slashes * 2 + ("\\'" if quote else "")

    return "'" + _BACKSLASHES_BEFORE_QUOTE.sub(escape, value) + "'"


def args_override(args: Sequence[str]) -> str:
    """The Hydra override that sets job.args to exactly `args`."""
    return "job.args=[" + ",".join(hydra_quote(a) for a in args) + "]"


# Lists of command-line arguments: `job.args=[--lr=0.1,--device=cpu]` is what users type,
# and Hydra's grammar refuses an unquoted `--x=y` item; each item is quoted for it.
ARGUMENT_LISTS = ("job.args", "job.resume_args", "job.args_may_change", "job.script_outputs")


def _split_items(inner: str) -> list[str] | None:
    """The items of a list's inside, split at commas outside quotes (None: unbalanced)."""
    items, current, quote = [], "", ""
    for char in inner:
        if quote:
            current += char
            if char == quote and not current.endswith("\\" + char):
                quote = ""
        elif char in "'\"":
            quote, current = char, current + char
        elif char == ",":
            items.append(current)
            current = ""
        else:
            current += char
    if quote:
        return None
    return [*items, current] if inner.strip() else []


def _item(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text  # quoted already: Hydra reads it as the user wrote it
    return hydra_quote(text)


def quote_argument_lists(overrides: Sequence[str]) -> list[str]:
    """`job.args=[--lr=0.1,--device=cpu]` as Hydra can read it: every unquoted item quoted.
    Other overrides, and values that are no single list (a sweep of lists), are kept."""
    out = []
    for override in overrides:
        key, sep, value = override.partition("=")
        inner = value[1:-1] if value.startswith("[") and value.endswith("]") else None
        items = _split_items(inner) if inner is not None and "]" not in inner else None
        if sep and key.lstrip("+") in ARGUMENT_LISTS and items is not None:
            override = f"{key}=[{','.join(_item(i) for i in items)}]"
        out.append(override)
    return out


def with_script_args(overrides: Sequence[str], args: Sequence[str] | None) -> list[str]:
    """The overrides, with argument lists quoted for Hydra, plus job.args from the
    arguments after `--` (refused when job.args is also set: which one would win is not
    obvious)."""
    overrides = quote_argument_lists(overrides)
    if args is None:
        return overrides
    for override in overrides:
        key = override.lstrip("+~").partition("=")[0]
        if key == "job.args":
            raise JzkError(
                f"{override} and arguments after `--` both set the script's arguments. "
                "HINT: keep one: everything after `--` is passed to the script as it is"
            )
    return [*overrides, args_override(args)]
