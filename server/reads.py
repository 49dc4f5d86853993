"""Reads never wait for the writer: they are answered by a reader of the same data directory
(the manifest's segments, a checkpoint and the intact tail, no lock) that folds what the writer
has made durable since the last read (`Ledger.catch_up`). Reads wait only for each other, and
see what was acknowledged before they started.

The routes' documents are read in the reader process (`answer`, server/reader_process.py): a
follower with a GIL of its own, so that a read costs what it costs alone and the event loop
answers meanwhile. What needs the follower's objects here stays in this process, on one
reader thread (`run`: a reset's dry-run plan) or under its lock (`ledger`: SQL preparation, the
metrics): the thread takes every read queued, catches up once, and answers them in turn, each
answer handed to the loop (`server.handoff`) as it is ready. The follower serializes reads
anyway; a thread pool per read only added `concurrent.futures`' hop, a context copy and a lock
convoy (`GET /healthz` at 16 connections: 3,800 -> 18,400 req/s).

SQL waits for no one and no one waits for it: its sandbox is prepared under the read lock
(copies of the view's tables, the list of segments), then the query runs outside it, under
its time limit, and is interrupted when its client leaves or the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from ledger import Ledger, QueryStopped
from ledger.reads.sandbox import SqlQuery
from server.committer import Stopping
from server.handoff import Answer, hand_over
from server.reader_process import ReaderLink, ReaderProcess

T = TypeVar("T")
_Read = tuple[Callable[[Ledger], Any], asyncio.Future[Any]]


class ReadSide:
    """The follower, the lock that serializes reads on it and the reader thread that runs the
    routes' reads; the SQL queries running."""

    def __init__(self, root: Path, loop: asyncio.AbstractEventLoop,
                 reader: ReaderProcess | None = None) -> None:
        """`reader`: the reader process, when the server started it already (else it starts
        here); its follower's open is waited for here."""
        self._ledger = Ledger.open(root, readonly=True)
        self._lock = threading.Lock()
        self._running: set[SqlQuery] = set()
        self._running_lock = threading.Lock()
        self._stopping = False
        self._loop = loop
        self._closed = False
        self._reads: queue.SimpleQueue[_Read | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="ledger-reader", daemon=True)
        self._thread.start()
        self._process = ReaderLink(root, loop, reader)

    def answer(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[bytes]:
        """`fn(follower, *args)` as JSON bytes, read in the reader process (called on the
        loop): `fn` a module-level function (server.answers), `args` plain values. A reader
        process that dies fails the reads it held (`ReaderGone`, 503), and another starts."""
        return self._process.read(fn, args)

    def run(self, fn: Callable[[Ledger], T]) -> asyncio.Future[T]:
        """`fn(follower)` on the reader thread (called on the loop), the follower caught up
        with the log as it is when the read is taken: the future gives what it returns or
        raises."""
        waiter: asyncio.Future[T] = self._loop.create_future()
        if self._closed:
            waiter.set_exception(Stopping("the server is shutting down"))
        else:
            self._reads.put((fn, waiter))
        return waiter

    def _serve(self) -> None:
        """The reader thread: every read queued, after one catch-up, until `close`."""
        while (first := self._reads.get()) is not None:
            batch, stop = [first], False
            while True:
                try:
                    read = self._reads.get_nowait()
                except queue.Empty:
                    break
                if read is None:
                    stop = True
                    break
                batch.append(read)
            self._answer(batch)
            if stop:
                return

    def _answer(self, batch: list[_Read]) -> None:
        """One catch-up for the batch, then each read in turn, its answer handed to the loop
        before the next read starts (a read ready early is never held behind a slow one)."""
        with self._lock:
            try:
                self._ledger.catch_up()
            except BaseException as e:  # every waiter gets it; the thread goes on
                hand_over(self._loop, [(waiter, None, _answerable(e)) for _, waiter in batch])
                return
            for fn, waiter in batch:
                if waiter.done():  # its client left (a hint: checked again on the loop)
                    continue
                try:
                    answer: Answer = (waiter, fn(self._ledger), None)
                except BaseException as e:  # handed to the request; the thread goes on
                    answer = (waiter, None, _answerable(e))
                hand_over(self._loop, [answer])

    @contextlib.contextmanager
    def ledger(self) -> Iterator[Ledger]:
        """The follower, caught up with the log as it is now (for callers on other threads)."""
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
        self._process.close(timeout=30)
        self._closed = True
        self._reads.put(None)
        self._thread.join()
        with self._lock:
            self._ledger.close()


def _answerable(e: BaseException) -> Exception:
    """What a request gets for a failed read: the error itself, or for an exit or interrupt
    raised inside a read (which must neither stop the reader thread, leaving every later read
    waiting, nor reach the event loop as one) an error naming it."""
    return e if isinstance(e, Exception) else RuntimeError(f"the read was stopped: {e!r}")
