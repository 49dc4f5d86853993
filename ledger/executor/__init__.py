"""The one way a batch of commands enters the ledger (`batch.execute`): the column-wise fold
(`columnar`, with the keys it keeps as columns, `resident`), the per-command fold (`handlers`),
the run's results (`run_results`), and importers' commands run through it (`importing`).

May import every room below it: `ledger.reset`, `ledger.importers`, `ledger.lag`,
`ledger.reads`, `ledger.store`, `ledger.commands`, `ledger.fold`, `ledger.errors`,
`ledger.limits`, `ledger.timeparse`."""
