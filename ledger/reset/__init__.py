"""Resets: the scenarios and their pure planning (`scenarios`), planning from a command or a
reviewed plan against the log (`plan`), and the guardrails of `reset-policy.toml` (`policy`).

May import: `ledger.importers`, `ledger.reads`, `ledger.store`, `ledger.commands`,
`ledger.fold`, `ledger.errors`, `ledger.limits`, `ledger.timeparse`."""
