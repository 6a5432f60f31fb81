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


def with_script_args(overrides: Sequence[str], args: Sequence[str] | None) -> list[str]:
    """The overrides plus job.args from the arguments after `--` (refused when job.args is
    also set: which one would win is not obvious)."""
    overrides = list(overrides)
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
