"""offset-ledger's domain: typed commands and their executor, events, the fold, the DuckDB view,
point-in-time state.

`Ledger.open(path)` is the public API; every write is a batch of commands (`Ledger.submit`), and
every CLI command and HTTP route is one of its methods.
"""

from ledger.commands.command import (
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
from ledger.commands.results import CommitResult, PullResult, ResetResult, Result
from ledger.errors import (
    HistoryUnavailable,
    InvalidInput,
    LedgerError,
    LedgerUnusable,
    QueryStopped,
    RefusedError,
)
from ledger.fold.state import PlanItem
from ledger.ledger import Ledger, ResetPlan
from ledger.reset.scenarios import Scenario, Scope

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
    "QueryStopped",
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
