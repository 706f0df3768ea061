"""Exceptions that mean "bad input or a failed run", reported by entry points as one line.

A plain ValueError is an internal error (a bug) and keeps its traceback; bad input raises :class:`UserError`.
"""


class UserError(ValueError):
    """Bad input: an argument, config, dataset or checkpoint the user supplied; the message says what to change."""


class RolloutDivergedError(RuntimeError):
    """A neural rollout produced non-finite states."""


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (its type name if empty), for one-line reports."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
