"""The part every candidate app shares: the commit body, its decoding, and the group committer.

Why: the stacks must differ only in their HTTP layer, so the JSON decoding (msgspec into a
Struct), the queue, the one writer and the one `os.write` + `os.fsync` per batch (standing in
for `Ledger.submit`) are the same code in each app.

Configured by environment variables, so that one app module serves every variant:
- `HTTP_BENCH_SYNC`: `thread` (write + fsync in the default executor: the loop keeps reading
  requests while the disk syncs), `inline` (write + fsync on the loop), `none` (write, no fsync:
  the pure HTTP overhead);
- `HTTP_BENCH_FILE`: the file the batches are appended to (a temp file when unset);
- `HTTP_BENCH_BATCH_MAX`: the most requests one batch takes (default 4096);
- `HTTP_BENCH_DELAY_MS`: a pause before each batch's write (default 0), standing for a slow
  disk, so that the limits probe has requests in flight when it sends SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from typing import Annotated, Literal

import msgspec

SyncMode = Literal["thread", "inline", "none"]
SYNC_MODES: tuple[SyncMode, ...] = ("thread", "inline", "none")

MAX_BODY_BYTES = 16 * 1024 * 1024
"""The DESIGN's default `--max-body-bytes`: over it the apps answer 413 before reading the body."""

JSON_HEADERS = {"content-type": "application/json"}

NonEmpty = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]


class CommitRequest(msgspec.Struct, forbid_unknown_fields=True):
    """The body of `POST /v1/commit` (the DESIGN's fields, less `generation`)."""

    group: NonEmpty
    topic: NonEmpty
    queue_id: NonNegative
    offset: NonNegative
    client: str | None = None


class Accepted(msgspec.Struct):
    """The 200 answer: the offset now durable for the key."""

    accepted: bool
    offset: int


class ErrorBody(msgspec.Struct):
    """A 4xx answer: one line naming the bad value."""

    error: str


_DECODER = msgspec.json.Decoder(CommitRequest)
_ENCODER = msgspec.json.Encoder()
HEALTHZ_BODY = b'{"ok":true}'
TOO_LARGE_BODY = _ENCODER.encode(ErrorBody(f"body over {MAX_BODY_BYTES} bytes"))


class BadRequest(ValueError):
    """A body that is not a valid commit; its message is the 400's `error`."""


def decode_commit(body: bytes) -> CommitRequest:
    """The commit in `body`, or BadRequest naming what is wrong (msgspec says which field)."""
    try:
        return _DECODER.decode(body)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise BadRequest(str(exc)) from None


def encode_accepted(offset: int) -> bytes:
    """The 200 body for a durable commit."""
    return _ENCODER.encode(Accepted(True, offset))


def encode_error(message: str) -> bytes:
    """A 4xx body."""
    return _ENCODER.encode(ErrorBody(message))


def body_too_large(content_length: str | None) -> bool:
    """Whether a declared Content-Length is over the limit (checked before reading the body)."""
    if content_length is None:
        return False
    try:
        return int(content_length) > MAX_BODY_BYTES
    except ValueError:
        return True


class GroupCommitter:
    """One queue, one writer: each batch is made durable with one write and one fsync.

    Why: an answer may leave only once its events are durable, and an fsync costs about a
    millisecond here, so requests that arrive while one batch syncs form the next batch
    (throughput grows with concurrency; latency stays near one fsync).
    """

    def __init__(self, path: str | None = None, sync: SyncMode = "thread", batch_max: int = 4096,
                 delay_ms: float = 0.0) -> None:
        if sync not in SYNC_MODES:
            raise ValueError(f"sync mode {sync!r} is not one of {SYNC_MODES}")
        self.sync: SyncMode = sync
        self.batch_max = batch_max
        self.delay_s = delay_ms / 1000
        if path is None:
            fd, path = tempfile.mkstemp(prefix="http-bench-", suffix=".log")
            os.close(fd)
        self.path = path
        self.fd = -1
        self.batches = 0
        self.requests = 0
        self._queue: asyncio.Queue[tuple[CommitRequest, asyncio.Future[int]] | None] | None = None
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def from_env(cls) -> GroupCommitter:
        """The committer the environment variables (module docstring) describe."""
        sync = os.environ.get("HTTP_BENCH_SYNC", "thread")
        if sync not in SYNC_MODES:
            raise SystemExit(f"HTTP_BENCH_SYNC={sync!r}: expected one of {', '.join(SYNC_MODES)}")
        return cls(os.environ.get("HTTP_BENCH_FILE"), sync,  # type: ignore[arg-type]
                   int(os.environ.get("HTTP_BENCH_BATCH_MAX", "4096")),
                   float(os.environ.get("HTTP_BENCH_DELAY_MS", "0")))

    def start(self) -> None:
        """Open the file and start the writer on the running loop."""
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._writer())

    async def stop(self) -> None:
        """Finish every queued commit, then close the file (the graceful-shutdown half)."""
        if self._task is None or self._queue is None:
            return
        self._queue.put_nowait(None)  # after every commit already queued
        await self._task
        os.close(self.fd)
        mean = self.requests / self.batches if self.batches else 0.0
        print(f"group-commit: sync={self.sync} batches={self.batches} requests={self.requests} "
              f"mean_batch={mean:.2f}", file=sys.stderr, flush=True)

    async def submit(self, req: CommitRequest) -> int:
        """Queue `req`; return its offset once the batch holding it is durable."""
        assert self._queue is not None, "GroupCommitter.start() was not called"
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((req, fut))
        return await fut

    def _write(self, data: bytes) -> None:
        os.write(self.fd, data)
        if self.sync != "none":
            os.fsync(self.fd)

    async def _writer(self) -> None:
        assert self._queue is not None
        queue = self._queue
        loop = asyncio.get_running_loop()
        stopping = False
        while not stopping:
            first = await queue.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self.batch_max and not queue.empty():
                item = queue.get_nowait()
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            data = b"".join(_ENCODER.encode(req) + b"\n" for req, _ in batch)
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            try:
                if self.sync == "thread":
                    await loop.run_in_executor(None, self._write, data)
                else:
                    self._write(data)
            except OSError as exc:
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            self.batches += 1
            self.requests += len(batch)
            for req, fut in batch:
                if not fut.done():  # a client that went away cancelled its future
                    fut.set_result(req.offset)
