"""What goes in and what comes out: the typed commands (`command`: one msgspec Struct per op,
decoded and validated once), NDJSON batching and bulk decoding (`ndjson`), and the results
(`results`: one Struct per kind of answer).

May import: `ledger.errors`, `ledger.limits`, `ledger.timeparse`."""
