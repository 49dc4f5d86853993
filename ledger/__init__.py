"""offset-ledger's domain: events, the fold, the DuckDB view, point-in-time state.

`Ledger.open(path)` is the public API; every CLI command is one of its methods.
"""

from ledger.errors import (
    HistoryUnavailable,
    InvalidInput,
    LedgerError,
    LedgerUnusable,
    RefusedError,
)
from ledger.ledger import Ledger, ResetPlan
from ledger.reset import Scenario, Scope
from ledger.state import CommitResult, PlanItem, PullResult

__all__ = [
    "CommitResult",
    "HistoryUnavailable",
    "InvalidInput",
    "Ledger",
    "LedgerError",
    "LedgerUnusable",
    "PlanItem",
    "PullResult",
    "RefusedError",
    "ResetPlan",
    "Scenario",
    "Scope",
]
