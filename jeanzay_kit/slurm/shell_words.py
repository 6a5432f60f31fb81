"""Values as bash words, for the body of a rendered script. Pure.

shell_word: a word that means exactly the value (nothing in it is expanded).
expanding_word: a word in which `$NAME` and `${NAME}` are expanded on the node and
nothing else is (a container image such as $SINGULARITY_ALLOWED_DIR/pt.sif);
config/container_rules.py only_variables() admits the values it takes.
"""

from __future__ import annotations

import re
import shlex

from jeanzay_kit.config.collector import CONTROL as _CONTROL
from jeanzay_kit.config.collector import VARIABLE as _VARIABLE
from jeanzay_kit.config.collector import only_variables
from jeanzay_kit.errors import RenderError

# Stands for the array task's id inside a value (an array task's run directory): the
# rendered word expands "${SLURM_ARRAY_TASK_ID}" there and quotes the rest as it is.
ARRAY_TASK = "\ue000jzk-array-task\ue000"
ARRAY_TASK_WORD = '"${SLURM_ARRAY_TASK_ID}"'
# An array task's run directory below job.run_dir, so no two tasks share one.
ARRAY_TASK_DIR = "task-" + ARRAY_TASK


def shell_word(value: object) -> str:
    """One bash word that means exactly `value`, even with control characters in it.

    shlex.quote keeps a newline inside single quotes, which is safe in a command but
    not in a comment (the newline would end the comment); ANSI-C quoting ($'...') spells
    control characters as escapes, so the word always stays on one line. ARRAY_TASK in
    `value` becomes the array task's id, expanded by bash (adjacent quoted parts join).
    """
    text = str(value)
    if ARRAY_TASK in text:
        parts = text.split(ARRAY_TASK)
        return ARRAY_TASK_WORD.join(_quoted(part) if part else "" for part in parts)
    return _quoted(text)


def _quoted(text: str) -> str:
    if "'" in text and not _CONTROL.search(text) and not re.search(r'[$`"\\!]', text):
        return f'"{text}"'  # readable: nothing in it is special inside double quotes
    if not _CONTROL.search(text):
        return shlex.quote(text)
    escaped = "".join(
        f"\\x{ord(ch):02x}" if _CONTROL.match(ch) or ch in "\\'" else ch for ch in text
    )
    return f"$'{escaped}'"


def expanding_word(value: str) -> str:
    """One bash word in which only `$NAME`/`${NAME}` are expanded: double quotes around
    the value, refused when anything else in it is special there."""
    if not only_variables(value):
        raise RenderError(f"{value!r}: only $NAME or ${{NAME}} may be expanded in it on the node")
    if not _VARIABLE.search(value):
        return shell_word(value)
    return f'"{value}"'
