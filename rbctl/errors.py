"""Errors that rbctl reports to the user as one line (exit code 2, no traceback unless --debug)."""


class UserError(Exception):
    """A bad input from the user: reported as one line, exit code 2, no traceback."""
