"""The writing Ledger in a process of its own, and the pipe to it (both ends).

The server's Python work is one GIL: the event loop's (routing, JSON, answers) and the writer's
(fold, append, fsync's bookkeeping, results) took turns on it, so at 64 connections one core
idled while requests waited for the other. Here the writer runs in a child process that owns
the data directory's writer lock; the server's event loop sends it each request's commands
as they come, and reads the results, which leave the child only once they are durable. The
child is the group commit: whenever it is free it takes every batch waiting on the pipe (up to
`batch_commands_max` commands) as one write, one fsync, and answers each batch in turn; so the
next batch waits in the pipe, not on the loop, while the child writes. Reads never came this
way: the read side follows the log from disk.

Messages are msgspec msgpack (commands as the tagged union they already are; a decoding error
travels as its message), one frame each over a socket pair. The child ignores SIGINT and
SIGTERM: it stops when told (`Close`: the ledger closes, view flush and checkpoint) or when the
server is gone (end of file on the pipe: it closes the ledger the same way). A child that dies
(kill -9, a crash) fails the batch in hand, unacknowledged, and the next batch starts a new one,
which recovers the log as any restart does.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import pickle
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

import msgspec

from ledger import Ledger, LedgerUnusable
from ledger.commands.command import AnyCommand, BlankLine, Command
from ledger.commands.results import (
    CommitResult,
    GroupDeleteResult,
    GroupResult,
    PullResult,
    QueueResult,
    ResetResult,
    Result,
    SyncResult,
)
from ledger.errors import InvalidInput, LedgerError
from ledger.reads.generations import QueueGeneration, QueueRef
from server.pipe import Frames, frame, read_frame

logger = logging.getLogger("offset_ledger.server")

#: Every kind of result, by its index on the wire.
RESULT_TYPES: tuple[type[Result], ...] = (Result, PullResult, CommitResult, QueueResult,
                                          SyncResult, GroupResult, GroupDeleteResult,
                                          ResetResult)
_RESULT_INDEX = {t: i for i, t in enumerate(RESULT_TYPES)}


# ---------------------------------------------------------------- messages to the child
class Write(msgspec.Struct, tag="write", array_like=True, gc=False):
    """A batch: `commands` with None where a line's decoding error stands (in `errors`: its
    index, whether the line was blank, its message), per command its actor, its denial and
    whether its sender may backfill."""

    commands: list[AnyCommand | None]
    errors: list[tuple[int, bool, str]]
    actors: list[str | None]
    denied: list[str | None] | None
    backfill: list[bool]


class Generations(msgspec.Struct, tag="generations", array_like=True, gc=False):
    group: str
    queues: list[QueueRef] | None


class Close(msgspec.Struct, tag="close", array_like=True, gc=False):
    pass


# ---------------------------------------------------------------- answers from the child
class Ready(msgspec.Struct, tag="ready", array_like=True, gc=False):
    pass


class Written(msgspec.Struct, tag="written", array_like=True, gc=False):
    """A durable batch's results: each one's type (`RESULT_TYPES`), the results, how long the
    write and its append took in the child, and, on the first batch of a write, the commands of
    every batch the write took together (0 on the batches after it)."""

    kinds: list[int]
    results: list[msgspec.Raw]
    batch_s: float
    append_s: float
    write_commands: int


class Failed(msgspec.Struct, tag="failed", array_like=True, gc=False):
    """What the child raised, pickled (rare: a failed write or open)."""

    error: bytes


class Answered(msgspec.Struct, tag="answered", array_like=True, gc=False):
    generations: list[QueueGeneration]


class Closed(msgspec.Struct, tag="closed", array_like=True, gc=False):
    pass


_ENCODER = msgspec.msgpack.Encoder()
_TO_CHILD = msgspec.msgpack.Decoder(Write | Generations | Close)
_FROM_CHILD = msgspec.msgpack.Decoder(Ready | Written | Failed | Answered | Closed)
_RESULT_DECODERS = [msgspec.msgpack.Decoder(t) for t in RESULT_TYPES]


def encode_batch(commands: Sequence[Command | LedgerError], actors: Sequence[str | None],
                 denied: Sequence[str | None] | None, backfill: Sequence[bool]) -> bytes:
    """A batch as the child reads it."""
    sent: list[AnyCommand | None] = []
    errors: list[tuple[int, bool, str]] = []
    for i, c in enumerate(commands):
        if isinstance(c, LedgerError):
            sent.append(None)
            errors.append((i, type(c) is BlankLine, str(c)))
        else:
            sent.append(c)  # type: ignore[arg-type]
    return _ENCODER.encode(Write(sent, errors, list(actors),
                                 None if denied is None else list(denied), list(backfill)))


def decode_batch(batch: Write) -> list[Command | LedgerError]:
    """The commands of a `Write`, its decoding errors back in their places."""
    commands: list[Command | LedgerError] = batch.commands  # type: ignore[assignment]
    for i, blank, message in batch.errors:
        commands[i] = BlankLine(message) if blank else InvalidInput(message)
    return commands


def _results_message(results: list[Result], batch_s: float, append_s: float,
                     write_commands: int) -> bytes:
    encode = _ENCODER.encode
    return _ENCODER.encode(Written([_RESULT_INDEX[type(r)] for r in results],
                                   [msgspec.Raw(encode(r)) for r in results], batch_s, append_s,
                                   write_commands))


def _failed(e: BaseException) -> bytes:
    """`e` pickled for the parent; one that does not survive pickling as an error naming it."""
    try:
        pickled = pickle.dumps(e)
        pickle.loads(pickled)
    except Exception:
        pickled = pickle.dumps(LedgerUnusable(f"{type(e).__name__}: {e}"))
    return _ENCODER.encode(Failed(pickled))


# ---------------------------------------------------------------- what the server reads
Answer = Ready | Written | Failed | Answered | Closed


def decode_answer(payload: bytes) -> Answer:
    return _FROM_CHILD.decode(payload)


def encode_generations(group: str, queues: list[QueueRef] | None) -> bytes:
    return _ENCODER.encode(Generations(group, queues))


def results_of(written: Written) -> list[Result]:
    """A durable batch's results, each decoded as its type."""
    decoders = _RESULT_DECODERS
    return [decoders[k].decode(raw) for k, raw in zip(written.kinds, written.results,
                                                        strict=True)]


def error_of(answer: Answer) -> BaseException:
    """What the child raised (`Failed`), or an error naming an answer out of turn."""
    if isinstance(answer, Failed):
        return pickle.loads(answer.error)  # type: ignore[no-any-return]
    return LedgerUnusable(f"the writer process answered {type(answer).__name__} out of turn")


def died() -> LedgerUnusable:
    """What a request in flight gets when the child is gone."""
    return LedgerUnusable("the writer process exited: the write is not acknowledged; another "
                          "one recovers the log")


# ---------------------------------------------------------------- the server's end
class WriterProcess:
    """The child writing `root`, started on construction (its recovery done when this returns,
    or its error raised here), writing at most `batch_commands_max` commands as one. `sock` is
    the server's end of the pipe: the committer drives it from the event loop; `write` and
    `generations` are the same exchanges, blocking (one caller at a time)."""

    def __init__(self, root: Path, batch_commands_max: int) -> None:
        if not isinstance(root, Path):
            raise TypeError(f"the writer process takes the data directory's Path, not {root!r}")
        self.root = root
        ours, theirs = socket.socketpair()
        with theirs:
            # -P: the server's working directory must not shadow the installed packages
            self.proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "server.writer_process", str(theirs.fileno()),
                 str(root), str(batch_commands_max)], pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        self.sock = ours
        answer = self._exchange(None)
        if not isinstance(answer, Ready):
            self.sock.close()
            self.proc.wait()
            raise error_of(answer)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def write(self, commands: Sequence[Command | LedgerError], actors: Sequence[str | None],
              denied: Sequence[str | None] | None, backfill: Sequence[bool]
              ) -> tuple[list[Result], float]:
        """A batch folded and appended by the child, durable on return: its results and the
        append's seconds. Raises what the write raised (nothing of the batch is
        acknowledged)."""
        answer = self._exchange(encode_batch(commands, actors, denied, backfill))
        if isinstance(answer, Written):
            return results_of(answer), answer.append_s
        raise error_of(answer)

    def write_pipelined(self, batches: Sequence[bytes]) -> list[Written | Failed]:
        """Batches (`encode_batch`) sent at once, as a busy server's loop sends them, so that
        the child finds them waiting together: each batch's answer, in order."""
        self.sock.sendall(b"".join(frame(b) for b in batches))
        frames = Frames()
        answers: list[Written | Failed] = []
        while len(answers) < len(batches):
            data = self.sock.recv(1 << 20)
            if not data:
                raise died()
            answers.extend(decode_answer(p) for p in frames.feed(data))  # type: ignore[misc]
        return answers

    def generations(self, group: str, queues: list[QueueRef] | None) -> list[QueueGeneration]:
        """`Ledger.generations` on the writer's state between two batches."""
        answer = self._exchange(encode_generations(group, queues))
        if isinstance(answer, Answered):
            return answer.generations
        raise error_of(answer)

    def close(self, timeout: float | None = None) -> None:
        """The child closes the ledger and exits; killed if it has not within `timeout`."""
        try:
            self.sock.setblocking(True)
            self.sock.settimeout(timeout)
            self.sock.sendall(frame(_ENCODER.encode(Close())))
            with self.sock.makefile("rb") as stream:
                read_frame(stream)  # Closed (a failure to close is the child's to log)
        except OSError:
            pass  # gone already, or past the timeout
        finally:
            self.sock.close()
        self.reap(timeout)

    def reap(self, timeout: float | None = None) -> int:
        """Wait for the child to exit (killed after `timeout`); its exit code."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            logger.error("the writer process did not stop within %s s: killed", timeout)
            self.proc.kill()
            return self.proc.wait()

    def _exchange(self, message: bytes | None) -> Answer:
        """Send `message` (None: only read), then read the answer; a dead child answers
        `died` and is reaped."""
        try:
            if message is not None:
                self.sock.sendall(frame(message))
            with self.sock.makefile("rb") as stream:
                payload = read_frame(stream)
        except OSError:
            payload = None
        if payload is None:
            code = self.reap()
            logger.error("the writer process exited (code %s)", code)
            return Failed(pickle.dumps(died()))
        return decode_answer(payload)


# ---------------------------------------------------------------- the child's end
class _Inbox:
    """The messages the server sent, decoded, in order, as many as the pipe holds."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._frames = Frames()
        self.messages: deque[Write | Generations | Close] = deque()

    def fill(self, wait: bool) -> None:
        """Take in every message the pipe holds; if `wait` and none is in hand, wait for one
        first (at the end of the stream, none comes)."""
        while True:
            flags = 0 if wait and not self.messages else socket.MSG_DONTWAIT
            try:
                data = self._sock.recv(1 << 20, flags)
            except BlockingIOError:
                return
            if not data:
                return
            self.messages.extend(_TO_CHILD.decode(p) for p in self._frames.feed(data))

    def writes(self, first: Write, commands_max: int) -> list[Write]:
        """`first` and the batches waiting right after it, up to `commands_max` commands in
        all (`first` whatever its size)."""
        taken, n = [first], len(first.commands)
        self.fill(wait=False)
        while self.messages and isinstance(self.messages[0], Write) and \
                n + len(self.messages[0].commands) <= commands_max:
            batch = self.messages.popleft()
            taken.append(batch)  # type: ignore[arg-type]
            n += len(batch.commands)  # type: ignore[union-attr]
        return taken


def serve_writer(sock: socket.socket, root: Path, batch_commands_max: int) -> None:
    """The child: open the ledger (recovery), then answer messages until Close or end of
    file; the batches waiting together are written as one (up to `batch_commands_max`
    commands); a failed write answers its error and reopens the ledger from its log."""
    try:
        ledger = Ledger.open(root)
    except BaseException as e:
        sock.sendall(frame(_failed(e)))
        return
    # what opening loaded lives as long as the process: out of the collector's sight
    gc.collect()
    gc.freeze()
    sock.sendall(frame(_ENCODER.encode(Ready())))
    inbox = _Inbox(sock)
    try:
        while True:
            inbox.fill(wait=True)
            if not inbox.messages:
                return  # end of file: the server is gone; close the ledger, as on Close
            message = inbox.messages.popleft()
            if isinstance(message, Close):
                return
            if isinstance(message, Generations):
                try:
                    answer = frame(_ENCODER.encode(Answered(ledger.generations(
                        message.group, message.queues))))
                except Exception as e:
                    answer = frame(_failed(e))
            else:
                answer, ledger = _write(ledger, root, inbox.writes(message, batch_commands_max))
            sock.sendall(answer)
    except OSError:
        return  # the server's end is gone
    finally:
        try:
            ledger.close()
        except Exception:  # closing derived data; the log is already durable
            logger.exception("closing the ledger failed")
        with contextlib.suppress(OSError):
            sock.sendall(frame(_ENCODER.encode(Closed())))


def _write(ledger: Ledger, root: Path, batches: list[Write]) -> tuple[bytes, Ledger]:
    """`batches` folded and appended as one write (one fsync); each batch's answer, framed,
    once it is durable, its results' lines counted from its own first command."""
    started = time.perf_counter()
    commands: list[Command | LedgerError] = []
    actors: list[str | None] = []
    denied: list[str | None] = []
    backfill: list[bool] = []
    for b in batches:
        commands.extend(decode_batch(b))
        actors.extend(b.actors)
        denied.extend(b.denied if b.denied is not None else [None] * len(b.commands))
        backfill.extend(b.backfill)
    try:
        results = ledger.submit_decoded(commands, actor=actors, denied=denied,
                                        backfill=backfill)
    except Exception as e:  # nothing of these batches is acknowledged
        if isinstance(e, LedgerUnusable) or ledger.writer.unusable is not None:
            logger.error("the ledger failed a write; reopening it from its log")
            try:
                ledger.close()
            except Exception:
                logger.exception("closing the failed ledger")
            ledger = Ledger.open(root)
        return frame(_failed(e)) * len(batches), ledger
    batch_s, append_s = time.perf_counter() - started, ledger.writer.last_append_s
    answers, at = [], 0
    for i, b in enumerate(batches):
        mine = results[at:at + len(b.commands)]
        for result in mine:
            result.line -= at
        answers.append(frame(_results_message(mine, batch_s, append_s,
                                              len(commands) if i == 0 else 0)))
        at += len(b.commands)
    return b"".join(answers), ledger


def main(argv: Sequence[str]) -> None:
    # the server stops it (Close) or leaves it (end of file): a terminal's ^C or a service
    # manager's SIGTERM to the whole group must not cut a batch short
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s offset-ledger writer: %(message)s")
    fd, root, batch_commands_max = int(argv[1]), Path(argv[2]), int(argv[3])
    with socket.socket(fileno=fd) as sock:
        serve_writer(sock, root, batch_commands_max)


if __name__ == "__main__":
    main(sys.argv)
