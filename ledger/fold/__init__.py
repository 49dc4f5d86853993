"""The fold: DESIGN.md's rules as pure code, no I/O. `events` (one Struct per kind, one Arrow
schema) and `state` (the state and the rules that turn a command into events).

May import: `ledger.errors`, `ledger.limits`."""
