"""What each read route answers, as a function of a follower and the request's values.

They are module-level functions taking plain values (no closure over a request), so that a
read can be sent by name to the reader process (server/reader_process.py) and run there; each
returns the document the route encodes as JSON.
"""

from __future__ import annotations

from typing import Any

from ledger import Ledger
from ledger.reads.documents import (
    groups_doc,
    history_events,
    lag_summary_doc,
    progress_doc,
    state_doc,
)


def queues(led: Ledger, topic: str | None) -> Any:
    return led.queues(topic)


def groups(led: Ledger) -> Any:
    return groups_doc(led.groups())


def progress(led: Ledger, group: str, topic: str | None) -> Any:
    return progress_doc(led.progress(group, topic))


def lag(led: Ledger, group: str, topic: str | None, at: str | None, window: int,
        allowed_lag: int) -> Any:
    [doc] = led.lag(group=group, topic=topic, at_ms=at, window=window, allowed_lag=allowed_lag)
    return doc


def lag_all(led: Ledger, topic: str | None, at: str | None, window: int, allowed_lag: int,
            whole: bool) -> Any:
    doc = led.lag(topic=topic, at_ms=at, window=window, allowed_lag=allowed_lag)
    return doc if whole else lag_summary_doc(doc)


def lag_series(led: Ledger, since: str, until: str, every: int | str, group: str | None,
               topic: str | None) -> Any:
    return led.lag_series(since_ms=since, until_ms=until, every_ms=every, group=group,
                          topic=topic)


def history(led: Ledger, group: str | None, topic: str | None, queue_id: int | None,
            kind: str | None, since: str | None, until: str | None, limit: int | None,
            queue_events: bool) -> Any:
    return history_events(led.history(
        group=group, topic=topic, queue_id=queue_id, kind=kind, since_ms=since, until_ms=until,
        limit=limit, queue_events=queue_events))


def state(led: Ledger, at: str, group: str | None) -> Any:
    return state_doc(led.state_at(ts=at, group=group))


def lookup(led: Ledger, topic: str, when: str) -> Any:
    return led.offsets_for_time(topic, when)


def export(led: Ledger, group: str) -> Any:
    return led.export_rows(group)


def health(led: Ledger) -> Any:
    return {"ok": True, "next_seq": led.log.next_seq}
