"""Lag, time lag and lag health at any time (DESIGN.md "Lag health"): Burrow's rules as a pure
function (`health`), windows read from the log (`windows`), a queue's appends as of a time
(`appends`), and the document of `offset-ledger lag` (`document`).

May import: `ledger.reads`, `ledger.store`, `ledger.commands`, `ledger.fold`, `ledger.errors`,
`ledger.limits`, `ledger.timeparse`."""
