"""Reads never wait for the writer: they are answered by a reader of the same data directory
(the manifest's segments, a checkpoint and the intact tail, no lock) that folds what the writer
has made durable since the last read (`Ledger.catch_up`). Reads wait only for each other, and
see exactly what was acknowledged before they started, never a batch in flight.

SQL waits for no one and no one waits for it: its sandbox is prepared under the read lock
(copies of the view's tables, the list of segments), then the query runs outside it, under
its time limit, and is interrupted when its client leaves or the server stops.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from ledger import Ledger, QueryStopped
from ledger.reads.sandbox import SqlQuery


class ReadSide:
    """The follower and the lock that serializes reads on it; the SQL queries running."""

    def __init__(self, root: Path) -> None:
        self._ledger = Ledger.open(root, readonly=True)
        self._lock = threading.Lock()
        self._running: set[SqlQuery] = set()
        self._running_lock = threading.Lock()
        self._stopping = False

    @contextlib.contextmanager
    def ledger(self) -> Iterator[Ledger]:
        """The follower, caught up with the log as it is now."""
        with self._lock:
            self._ledger.catch_up()
            yield self._ledger

    def prepare_sql(self, query: str) -> SqlQuery:
        """A query's sandbox over the follower as it is now (under the read lock, briefly)."""
        with self.ledger() as led:
            return led.prepare_sql(query)

    def run_sql(self, query: SqlQuery, timeout_s: float) -> pa.Table:
        """Run a prepared query outside the read lock; `interrupt_all` can stop it."""
        with self._running_lock:
            if self._stopping:
                query.close()
                raise QueryStopped("sql stopped: the server is shutting down")
            self._running.add(query)
        try:
            return query.run(timeout_s)
        finally:
            with self._running_lock:
                self._running.discard(query)

    def interrupt_all(self, because: str) -> None:
        """Stop every running query and run no new one (the server stops)."""
        with self._running_lock:
            self._stopping = True
            running = list(self._running)
        for query in running:
            query.interrupt(because)

    def close(self) -> None:
        self.interrupt_all("the server is shutting down")
        with self._lock:
            self._ledger.close()
