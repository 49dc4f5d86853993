"""What operators' tools print, parsed into the commands a user could `apply`: one module per
tool (`kafka_describe`, `kafka_offsets`, `rocketmq_progress`, `rocketmq_offsets` and its
`rocketmq_watch`, `kafka_csv`) and their shared result and line errors (`result`). Pure: text
in, commands out; running them through the ledger is `ledger.executor.importing`.

May import: `ledger.commands`, `ledger.errors`, `ledger.limits`, `ledger.timeparse`."""
