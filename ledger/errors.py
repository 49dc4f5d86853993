"""The ledger's exceptions: `cli.py` maps them to exit codes (2 bad input, 1 refused by a rule)."""

from __future__ import annotations


class LedgerError(Exception):
    """Base of every error the ledger raises on purpose."""

    exit_code: int = 2


class InvalidInput(LedgerError):
    """Bad input from a user or a file: names the bad value; nothing was appended."""


class QueryStopped(InvalidInput):
    """A SQL query stopped before its answer: past its time limit, or interrupted."""


class RefusedError(LedgerError):
    """A rule refused the command (stale, fenced, invalid, policy); nothing was appended."""

    exit_code = 1

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason

    def __reduce__(self) -> tuple[type[RefusedError], tuple[str, str]]:
        """Pickled with both arguments (the server's writer process sends errors pickled)."""
        return type(self), (self.reason, str(self))


class HistoryUnavailable(LedgerError):
    """A question about history older than the log start (after log retention)."""


class LedgerUnusable(LedgerError):
    """A write failed after the in-memory state moved: the ledger must be reopened from disk."""
