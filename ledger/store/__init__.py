"""One data directory on disk: its settings, the `Writer` (the log, the fold's state, the
clock), the DuckDB view, checkpoints, retention and `verify`. Everything that makes events
durable or derives data from them lives here, below the commands that produce events.

May import: `ledger.fold`, `ledger.errors`, `ledger.limits`, `ledger.timeparse`, `storage`."""
