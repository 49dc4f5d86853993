"""Group commit (PostgreSQL's WAL writer, TigerBeetle's batching): requests from any number of
connections are written together, one fsync for all that waited, and every request is answered
once its events are durable. No answer leaves before its events are durable, and batch size
grows with load while latency stays near one fsync.

The writing Ledger lives in a process of its own (server/writer_process.py), so its fold and
append take no turns on the event loop's GIL. The loop itself speaks to it: the requests of one
turn of the loop go to the writer's socket as one batch at the end of that turn (never held
back), and the answers are read when the socket is readable, in the order sent, each setting
its requests' futures; no thread, no hand-off between threads. The writer takes every batch
waiting in the pipe as one write: while it writes, the next batch gathers there, so it never
waits for the loop. A writer that dies fails the batches it held (unacknowledged: their fate
is unknown, as after any crash) and another one is started off the loop (recovery), while
requests wait in the queue. Stopping stops accepting, answers everything already accepted, and
closes the ledger (view flush, checkpoint).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ledger.commands.command import Command
from ledger.commands.results import CommitResult, Result
from ledger.errors import LedgerError
from ledger.reads.generations import QueueGeneration, QueueRef
from server.pipe import Frames, Outbox, frame
from server.writer_process import (
    Answered,
    WriterProcess,
    Written,
    decode_answer,
    died,
    encode_batch,
    encode_generations,
    error_of,
    results_of,
)

logger = logging.getLogger(__name__)


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
class _Call:
    """A question for the writer's state (generations), asked between two batches."""

    message: bytes
    waiter: asyncio.Future[list[QueueGeneration]]


@dataclass
class _InFlight:
    """A batch the writer holds: its requests, or a call, and when it was sent."""

    requests: list[_Request] = field(default_factory=list)
    call: _Call | None = None
    commands: list[Command | LedgerError] = field(default_factory=list)
    sent: float = 0.0


@dataclass
class BatchStats:
    """What the metrics report: batches, their commands and their durations."""

    observe: Callable[[int, float, float], None] = lambda commands, batch_s, append_s: None
    #: A commit a rule refused: its group and the reason (stale, fenced, invalid).
    refused: Callable[[str, str], None] = lambda group, reason: None
    #: The writer process died and another one starts.
    restarted: Callable[[], None] = lambda: None


class Committer:
    """The queue and the writer process of `root` (its recovery done when this returns);
    everything runs on the event loop `loop`."""

    def __init__(self, root: Path, loop: asyncio.AbstractEventLoop, *,
                 batch_commands_max: int, pending_commands_max: int,
                 stats: BatchStats | None = None) -> None:
        self._root = root
        self._loop = loop
        self.stats = stats or BatchStats()
        self.batch_commands_max = batch_commands_max
        self.pending_commands_max = pending_commands_max
        self._queue: deque[_Request | _Call] = deque()
        self._pending = 0  # commands accepted, not yet answered
        self._in_flight: deque[_InFlight] = deque()  # sent, in the order sent
        self._flushing = False  # a send is due at the end of this turn of the loop
        self._frames = Frames()
        self._stopping = False
        self._idle: asyncio.Future[None] | None = None
        self._restarting = False
        self.writer: WriterProcess | None = None
        self._attach(WriterProcess(root, batch_commands_max))

    def submit(self, commands: Sequence[Command | LedgerError],
               actor: str | Sequence[str | None] | None,
               denied: Sequence[str | None] | None = None, *,
               backfill: bool = False) -> asyncio.Future[list[Result]]:
        """Queue a request's commands (called on the loop); the future gives their results
        once durable. `actor`: one for all, or one per command (None: the command's claim);
        `backfill`: the sender may give a `ts` beyond the clock skew."""
        if self._stopping:
            raise Stopping("the server is shutting down")
        if self._pending and self._pending + len(commands) > self.pending_commands_max:
            raise Busy(f"{self._pending} commands wait to be written: retry later")
        request = _Request(commands, actor, denied, backfill, self._loop.create_future())
        self._queue.append(request)
        self._pending += len(commands)
        self._flush_soon()
        return request.waiter

    async def generations(self, group: str, queues: list[QueueRef] | None
                          ) -> list[QueueGeneration]:
        """`Ledger.generations` on the writer's in-memory state between two batches (never one
        in flight: its events are durable): what is current now, at the cost of a lookup, with
        no DuckDB and no log. Waits for at most the batch in hand."""
        if self._stopping:
            raise Stopping("the server is shutting down")
        call = _Call(encode_generations(group, queues), self._loop.create_future())
        self._queue.append(call)
        self._flush_soon()
        return await call.waiter

    async def stop(self, timeout: float | None = None) -> None:
        """Accept nothing more; answer what was accepted (for at most `timeout` seconds);
        close the ledger."""
        self._stopping = True
        if self._queue or self._in_flight or self._restarting:
            self._idle = self._loop.create_future()
            try:
                await asyncio.wait_for(asyncio.shield(self._idle), timeout)
            except TimeoutError:
                logger.error("%d request(s) not written within %s s of the stop",
                             len(self._queue) + sum(len(f.requests) or 1
                                                    for f in self._in_flight), timeout)
        writer, self.writer = self.writer, None
        if writer is not None:
            self._detach(writer)
            await asyncio.to_thread(writer.close, timeout)

    # ---------------------------------------------------------------- the writer's socket
    def _attach(self, writer: WriterProcess) -> None:
        writer.sock.setblocking(False)
        self.writer = writer
        self._outbox = Outbox(self._loop, writer.sock)
        self._frames = Frames()
        self._loop.add_reader(writer.sock.fileno(), self._readable)

    def _detach(self, writer: WriterProcess) -> None:
        self._loop.remove_reader(writer.sock.fileno())
        self._loop.remove_writer(writer.sock.fileno())

    def _flush_soon(self) -> None:
        """Send what is queued once this turn of the loop has run: the requests that arrived
        in one turn go as one batch."""
        if not self._flushing:
            self._flushing = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Everything queued to the writer: a call alone, requests in batches of at most the
        batch limit, in the order they came."""
        self._flushing = False
        if not self._queue:
            return
        if self.writer is None:  # starting, or a start failed before: try again for these
            if not self._restarting:
                self._restart()
            return
        out = bytearray()
        now = time.perf_counter()
        while self._queue:
            flight = _InFlight(sent=now)
            head = self._queue[0]
            if isinstance(head, _Call):
                self._queue.popleft()
                flight.call = head
                message = head.message
            else:
                message = self._batch(flight)
            self._in_flight.append(flight)
            out += frame(message)
        self._outbox.send(out)

    def _batch(self, flight: _InFlight) -> bytes:
        """The requests at the head of the queue, up to the batch limit (one at least), as
        one batch in `flight`."""
        actors: list[str | None] = []
        denied: list[str | None] = []
        backfill: list[bool] = []
        commands = flight.commands
        while self._queue:
            r = self._queue[0]
            if isinstance(r, _Call) or (flight.requests and len(commands) + len(r.commands)
                                        > self.batch_commands_max):
                break
            self._queue.popleft()
            flight.requests.append(r)
            n = len(r.commands)
            commands.extend(r.commands)
            actors.extend([r.actor] * n if r.actor is None or isinstance(r.actor, str)
                          else r.actor)
            denied.extend(r.denied if r.denied is not None else [None] * n)
            backfill.extend([r.backfill] * n)
        return encode_batch(commands, actors, denied, backfill)

    def _readable(self) -> None:
        assert self.writer is not None
        try:
            data = self.writer.sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._writer_died()
            return
        for payload in self._frames.feed(data):
            self._answered(payload)
        self._maybe_idle()

    def _maybe_idle(self) -> None:
        """Tell a stop waiting for the queue to drain that it has."""
        if self._idle is not None and not self._idle.done() and not self._queue \
                and not self._in_flight and not self._restarting:
            self._idle.set_result(None)

    def _answered(self, payload: bytes) -> None:
        flight = self._in_flight.popleft()
        self._pending -= len(flight.commands)
        answer = decode_answer(payload)
        if flight.call is not None:
            waiter = flight.call.waiter
            if not waiter.done():
                if isinstance(answer, Answered):
                    waiter.set_result(answer.generations)
                else:
                    waiter.set_exception(error_of(answer))
            return
        if not isinstance(answer, Written):  # a failed write: nothing of it is acknowledged
            error = error_of(answer)
            for r in flight.requests:
                if not r.waiter.done():
                    r.waiter.set_exception(error)
            return
        results = results_of(answer)
        commands = flight.commands
        if answer.write_commands:  # the first batch of the writer's write: one fsync
            self.stats.observe(answer.write_commands, time.perf_counter() - flight.sent,
                               answer.append_s)
        for cmd, result in zip(commands, results, strict=True):
            if type(result) is CommitResult and result.reason is not None:
                self.stats.refused(cmd.group, result.reason)  # type: ignore[union-attr]
        at = 0
        for r in flight.requests:
            mine = results[at:at + len(r.commands)]
            for result in mine:
                result.line -= at
            at += len(r.commands)
            if not r.waiter.done():  # its client left: passed over, its commands durable
                r.waiter.set_result(mine)

    def _writer_died(self) -> None:
        """The writer is gone: the batches it held fail; another one starts off the loop."""
        writer, self.writer = self.writer, None
        assert writer is not None
        self._detach(writer)
        writer.sock.close()
        error = died()
        while self._in_flight:
            flight = self._in_flight.popleft()
            self._pending -= len(flight.commands)
            for waiter in ([flight.call.waiter] if flight.call is not None
                           else [r.waiter for r in flight.requests]):
                if not waiter.done():
                    waiter.set_exception(error)
        self._restart(writer)

    def _restart(self, dead: WriterProcess | None = None) -> None:
        """Another writer process, started (and the dead one reaped) off the loop; what is
        queued goes to it. If it cannot start, what waits fails with the reason, and the next
        request tries again."""
        self._restarting = True

        def start() -> WriterProcess:
            if dead is not None:
                code = dead.reap()
                logger.error("the writer process exited (code %s): starting another", code)
            return WriterProcess(self._root, self.batch_commands_max)

        def started(task: asyncio.Future[WriterProcess]) -> None:
            self._restarting = False
            error = task.exception()
            if error is None:
                self.stats.restarted()
                self._attach(task.result())
                self._flush()
            else:
                logger.error("starting another writer process failed: %s", error)
                while self._queue:
                    item = self._queue.popleft()
                    if isinstance(item, _Request):
                        self._pending -= len(item.commands)
                    if not item.waiter.done():
                        item.waiter.set_exception(error)
            self._maybe_idle()

        self._loop.run_in_executor(None, start).add_done_callback(started)
