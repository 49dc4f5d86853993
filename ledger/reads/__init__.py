"""Reads over the view, the log and checkpoints: progress, groups, history, the state at a
time (`timeline`, `state_at`), the lag series in SQL (`lag_series`, a timeline grid that the
SQL sandbox offers as a macro), read-only SQL (`sandbox`) and the documents the faces print.

May import: `ledger.store`, `ledger.fold`, `ledger.errors`, `ledger.limits`, `ledger.timeparse`."""
