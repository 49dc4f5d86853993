"""Retention: offsets of idle groups expire (offset retention, as Kafka's
`offsets.retention.minutes`), and old log segments already covered by a checkpoint are deleted
(log retention: the log start seq advances; earlier history is then refused, naming the
earliest point still answerable)."""

from __future__ import annotations

from typing import Any

from ledger.fold.events import EventBuffer
from ledger.store.writer import Writer


def run_retention(writer: Writer, offsets_retention_ms: int | None,
                  log_retention_ms: int | None) -> dict[str, Any]:
    """Expire idle offsets (expire events, one append); retire segments older than
    `log_retention_ms` once a checkpoint at the log end covers them."""
    writer.check_writable()
    retention = offsets_retention_ms or writer.settings.offsets_retention_ms
    events = EventBuffer()
    try:
        expired = writer.state.decide_expire_all(writer.now_ms(), retention, events)
        writer.append(events)
    except BaseException as e:
        writer.fail(e)
        raise
    retired: dict[str, Any] = {"segments_deleted": 0}
    log = writer.log
    if log_retention_ms is not None:
        if not log.checkpoints() or log.checkpoints()[-1] < log.next_seq:
            log.roll()
            writer.checkpoint()
        covered = log.checkpoints()[-1]
        result = log.retain(covered_seq=covered, age_ms_max=log_retention_ms)
        retired = {"segments_deleted": len(result.deleted), "log_start_seq": log.start_seq}
    return {"offsets_expired": expired, **retired}
