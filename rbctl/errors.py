"""Errors that rbctl reports to the user as one line (exit code 2, no traceback unless --debug)."""

from __future__ import annotations

import sys
from typing import Callable


class UserError(Exception):
    """A bad input from the user: reported as one line, exit code 2, no traceback."""


def exit_code(call: Callable[[], object]) -> int:
    """A script's exit code for ``call``, as the `rbctl` command reports a bad input: 0, or, where it
    raises a `UserError`, that error as one line on stderr ("error: ...") and 2."""
    try:
        call()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
