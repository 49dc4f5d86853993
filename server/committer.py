"""Group commit (PostgreSQL's WAL writer, TigerBeetle's batching): requests from any number of
connections join one queue; one writer thread drains whatever is queued (up to a batch limit),
runs it through the ledger as one batch (one fsync), then answers every request in it. No
answer leaves before its events are durable, and batch size grows with load while latency
stays near one fsync.

Requests come from the event loop and wait on the loop's own futures: the writer hands a
batch's answers back in one callback (one wake-up of the loop per batch, not one per request,
and none of `concurrent.futures`' locks and conditions per request).

The writer thread is the only one that touches the writing Ledger. Stopping stops accepting,
answers everything already accepted, and closes the ledger (view flush, checkpoint).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ledger import Ledger, LedgerUnusable
from ledger.commands.command import Command
from ledger.commands.results import CommitResult, Result
from ledger.errors import LedgerError
from server.handoff import Answer, hand_over

logger = logging.getLogger(__name__)
T = TypeVar("T")


class Busy(Exception):
    """Too many commands wait already: the client should retry later (503)."""


class Stopping(Exception):
    """The server is shutting down and accepts no new command (503)."""


@dataclass
class _Request:
    commands: Sequence[Command | LedgerError]
    actor: str | Sequence[str | None] | None
    denied: Sequence[str | None] | None
    backfill: bool
    waiter: asyncio.Future[list[Result]]


@dataclass
class BatchStats:
    """What the metrics report: batches, their commands and their durations."""

    observe: Callable[[int, float, float], None] = lambda commands, batch_s, append_s: None
    #: A commit a rule refused: its group and the reason (stale, fenced, invalid).
    refused: Callable[[str, str], None] = lambda group, reason: None


class Committer:
    """One writer thread draining one queue into `Ledger.submit_decoded`; requests come from
    the event loop `loop` and are answered on it."""

    def __init__(self, open_ledger: Callable[[], Ledger], loop: asyncio.AbstractEventLoop, *,
                 batch_commands_max: int, pending_commands_max: int,
                 stats: BatchStats | None = None) -> None:
        self._open = open_ledger
        self._loop = loop
        self.ledger = open_ledger()
        self.batch_commands_max = batch_commands_max
        self.pending_commands_max = pending_commands_max
        self.stats = stats or BatchStats()
        self._queue: deque[_Request] = deque()
        self._pending = 0
        self._cond = threading.Condition()
        #: Held while a batch folds and appends: what `read_current` reads is durable.
        self._batch_lock = threading.Lock()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="ledger-writer", daemon=True)
        self._thread.start()

    def submit(self, commands: Sequence[Command | LedgerError],
               actor: str | Sequence[str | None] | None,
               denied: Sequence[str | None] | None = None, *,
               backfill: bool = False) -> asyncio.Future[list[Result]]:
        """Queue a request's commands (called on the loop); the future gives their results
        once durable. `actor`: one for all, or one per command (None: the command's claim);
        `backfill`: the sender may give a `ts` beyond the clock skew."""
        request = _Request(commands, actor, denied, backfill, self._loop.create_future())
        with self._cond:
            if self._stopping:
                raise Stopping("the server is shutting down")
            if self._pending and self._pending + len(commands) > self.pending_commands_max:
                raise Busy(f"{self._pending} commands wait to be written: retry later")
            self._queue.append(request)
            self._pending += len(commands)
            self._cond.notify()
        return request.waiter

    def read_current(self, fn: Callable[[Ledger], T]) -> T:
        """`fn(ledger)` on the writer's in-memory state between two batches (never one in
        flight: its events are durable): the reads of what is current now that cost a lookup
        (generations), with no DuckDB and no log. Waits for at most the batch in hand."""
        with self._batch_lock:
            return fn(self.ledger)

    def stop(self, timeout: float | None = None) -> None:
        """Accept nothing more; answer what was accepted; close the ledger."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout)

    # ---------------------------------------------------------------- the writer thread
    def _take(self) -> list[_Request] | None:
        with self._cond:
            while not self._queue and not self._stopping:
                self._cond.wait()
            if not self._queue:
                return None
            batch: list[_Request] = []
            size = 0
            while self._queue and (not batch or size + len(self._queue[0].commands)
                                   <= self.batch_commands_max):
                request = self._queue.popleft()
                batch.append(request)
                size += len(request.commands)
            self._pending -= size
            return batch

    def _run(self) -> None:
        try:
            while (batch := self._take()) is not None:
                with self._batch_lock:
                    self._write(batch)
        finally:
            try:
                self.ledger.close()
            except Exception:  # closing derived data; the log is already durable
                logger.exception("closing the ledger failed")

    def _write(self, batch: list[_Request]) -> None:
        commands: list[Command | LedgerError] = []
        actors: list[str | None] = []
        denied: list[str | None] = []
        backfill: list[bool] = []
        for r in batch:
            commands.extend(r.commands)
            n = len(r.commands)
            actors.extend([r.actor] * n if r.actor is None or isinstance(r.actor, str)
                          else r.actor)
            denied.extend(r.denied if r.denied is not None else [None] * n)
            backfill.extend([r.backfill] * n)
        started = time.perf_counter()
        try:
            results = self.ledger.submit_decoded(commands, actor=actors, denied=denied,
                                                 backfill=backfill)
        except BaseException as e:  # a failed write: nothing of this batch is acknowledged
            hand_over(self._loop, [(r.waiter, None, e) for r in batch])
            if isinstance(e, LedgerUnusable) or self.ledger.writer.unusable is not None:
                self._reopen()
            if not isinstance(e, Exception):
                raise
            return
        self.stats.observe(len(commands), time.perf_counter() - started,
                           self.ledger.writer.last_append_s)
        for cmd, result in zip(commands, results, strict=True):
            if type(result) is CommitResult and result.reason is not None:
                self.stats.refused(cmd.group, result.reason)  # type: ignore[union-attr]
        at = 0
        answers: list[Answer] = []
        for r in batch:
            mine = results[at:at + len(r.commands)]
            for result in mine:
                result.line -= at
            at += len(r.commands)
            answers.append((r.waiter, mine, None))
        hand_over(self._loop, answers)  # one wake-up of the loop for the whole batch

    def _reopen(self) -> None:
        """After a failed write the state may be ahead of the log: start again from disk."""
        logger.error("the ledger failed a write; reopening it from its log")
        try:
            self.ledger.close()
        except Exception:
            logger.exception("closing the failed ledger")
        self.ledger = self._open()

