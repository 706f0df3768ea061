"""Exceptions that mean "bad input or a failed run", reported by entry points as one line."""


class RolloutDivergedError(RuntimeError):
    """A neural rollout produced non-finite states."""
