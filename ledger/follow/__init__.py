"""Following a live cluster: `translate` (records -> a batch's commands, pure), `sink` (where
batches go: a ledger this process owns, or a server), `follower` (the loop over a Kafka
cluster's offsets topic with confluent-kafka, imported lazily).

May import every room before it, `ledger.ledger` included."""
