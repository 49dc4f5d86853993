"""offset-ledger's domain: typed commands and their executor, events, the fold, the DuckDB view,
point-in-time state.

`Ledger.open(path)` is the public API; every write is a batch of commands (`Ledger.submit`), and
every CLI command and HTTP route is one of its methods.
"""

from ledger.commands import (
    Command,
    Commit,
    GroupDelete,
    GroupSet,
    PlanRow,
    Pull,
    QueueAppend,
    QueueBounds,
    QueueTruncate,
    Reset,
    Sync,
)
from ledger.errors import (
    HistoryUnavailable,
    InvalidInput,
    LedgerError,
    LedgerUnusable,
    RefusedError,
)
from ledger.ledger import Ledger, ResetPlan
from ledger.reset import Scenario, Scope
from ledger.results import CommitResult, PullResult, ResetResult, Result
from ledger.state import PlanItem

__all__ = [
    "Command",
    "Commit",
    "CommitResult",
    "GroupDelete",
    "GroupSet",
    "HistoryUnavailable",
    "InvalidInput",
    "Ledger",
    "LedgerError",
    "LedgerUnusable",
    "PlanItem",
    "PlanRow",
    "Pull",
    "PullResult",
    "QueueAppend",
    "QueueBounds",
    "QueueTruncate",
    "RefusedError",
    "Reset",
    "ResetPlan",
    "ResetResult",
    "Result",
    "Scenario",
    "Scope",
    "Sync",
]
