"""Reads never wait for the writer: they are answered by a reader of the same data directory
(the manifest's segments, a checkpoint and the intact tail, no lock) that folds what the writer
has made durable since the last read (`Ledger.catch_up`). Reads wait only for each other, and
see exactly what was acknowledged before they started, never a batch in flight.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

from ledger import Ledger


class ReadSide:
    """The follower and the lock that serializes reads on it."""

    def __init__(self, root: Path) -> None:
        self._ledger = Ledger.open(root, readonly=True)
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def ledger(self) -> Iterator[Ledger]:
        """The follower, caught up with the log as it is now."""
        with self._lock:
            self._ledger.catch_up()
            yield self._ledger

    def close(self) -> None:
        with self._lock:
            self._ledger.close()
