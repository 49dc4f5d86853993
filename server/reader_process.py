"""The routes' reads in a process of its own: a follower of the durable log with a GIL of its
own, and the pipe to it (both ends).

Why a process: a read on a thread of the server's process took turns on one GIL with the event
loop. Every Arrow call of a read lets the GIL go and takes it back, and the loop takes it in
between, so a group's hour at 10M events cost 1.6 ms of the reader thread's CPU in the server
against 0.9 ms alone, and 1.3 ms run on the loop itself. In a process of its own it costs what
it costs alone, while the loop answers on the other core.

A read crosses as a module-level function of `server.answers` and its plain arguments
(pickled); its answer comes back as the JSON bytes the route sends, or the error it raised
(pickled), one frame per read, in the order sent. The child takes every read waiting in the
pipe, catches up with the log once, and answers each in turn as it is ready (one ready early is
not held behind a slow one). It holds no lock and writes nothing: killing it loses nothing,
and the server starts another. It ignores SIGINT and SIGTERM and ends at the end of its pipe
(the server closed it, or is gone).
"""

from __future__ import annotations

import asyncio
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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ledger import Ledger, LedgerUnusable
from ledger.reads.documents import encode_json
from server.pipe import Frames, Outbox, frame, read_frame

logger = logging.getLogger("offset_ledger.server")

_READY, _JSON, _ERROR = b"R", b"J", b"E"
#: A read: a module-level function of a follower (server.answers) and its arguments.
Read = tuple[Callable[..., Any], tuple[Any, ...]]


class ReaderGone(LedgerUnusable):
    """The reader process exited with reads in flight (503: another one starts)."""


def encode_read(fn: Callable[..., Any], args: Sequence[Any]) -> bytes:
    """A read as the child takes it."""
    return pickle.dumps((fn, tuple(args)), protocol=pickle.HIGHEST_PROTOCOL)


def decode_answer(payload: bytes) -> bytes:
    """A read's JSON bytes, or the error it raised, raised here."""
    if payload[:1] == _JSON:
        return payload[1:]
    if payload[:1] == _ERROR:
        raise pickle.loads(payload[1:])
    raise ReaderGone(f"the reader process answered {payload[:16]!r} out of turn")


def _error(e: BaseException) -> bytes:
    """`e` for the parent: itself where it survives pickling, else an error naming it; an exit
    or interrupt raised inside a read as an error (it must not end the child)."""
    if not isinstance(e, Exception):
        e = RuntimeError(f"the read was stopped: {e!r}")
    try:
        pickled = pickle.dumps(e)
        pickle.loads(pickled)
    except Exception:
        pickled = pickle.dumps(RuntimeError(f"{type(e).__name__}: {e}"))
    return _ERROR + pickled


# ---------------------------------------------------------------- the server's end
class ReaderProcess:
    """The child reading `root`, started on construction; `ready` waits until its follower is
    open (so that the server starts it beside the writer and waits for both at once). `sock`
    is the server's end of the pipe."""

    def __init__(self, root: Path) -> None:
        ours, theirs = socket.socketpair()
        with theirs:
            # -P: the server's working directory must not shadow the installed packages
            self.proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "server.reader_process", str(theirs.fileno()),
                 str(root)], pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL)
        self.sock = ours

    @classmethod
    def started(cls, root: Path) -> ReaderProcess:
        """A child whose follower is open (or its error raised here)."""
        process = cls(root)
        process.ready()
        return process

    def ready(self) -> None:
        """Wait until the follower is open; the child's error raised here if it is not."""
        with self.sock.makefile("rb") as stream:
            first = read_frame(stream)
        if first != _READY:
            self.sock.close()
            self.proc.wait()
            if first is None:
                raise ReaderGone("the reader process exited before it opened the ledger")
            decode_answer(first)  # raises the child's error

    @property
    def pid(self) -> int:
        return self.proc.pid

    def close(self, timeout: float | None = None) -> int:
        """End the child (the end of its pipe; killed if it has not exited within
        `timeout`); its exit code."""
        with contextlib.suppress(OSError):
            self.sock.close()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            logger.error("the reader process did not stop within %s s: killed", timeout)
            self.proc.kill()
            return self.proc.wait()


class ReaderLink:
    """The event loop's end: reads sent as they come, answers read when the socket is
    readable, each setting its read's future; a child that dies fails the reads it held
    (`ReaderGone`) and another one is started off the loop while new reads wait."""

    def __init__(self, root: Path, loop: asyncio.AbstractEventLoop,
                 process: ReaderProcess | None = None) -> None:
        self._root = root
        self._loop = loop
        self._in_flight: deque[asyncio.Future[bytes]] = deque()
        self._waiting: list[tuple[bytes, asyncio.Future[bytes]]] = []
        self._frames = Frames()
        self._closed = False
        self._starting = False
        self.process: ReaderProcess | None = None
        if process is None:
            process = ReaderProcess(root)
        process.ready()
        self._attach(process)

    def read(self, fn: Callable[..., Any], args: Sequence[Any]) -> asyncio.Future[bytes]:
        """`fn(follower, *args)` encoded as JSON, in the child (called on the loop)."""
        waiter: asyncio.Future[bytes] = self._loop.create_future()
        if self._closed:
            waiter.set_exception(ReaderGone("the server is shutting down"))
            return waiter
        message = frame(encode_read(fn, args))
        if self.process is None:
            self._waiting.append((message, waiter))
            if not self._starting:
                self._restart()
            return waiter
        self._in_flight.append(waiter)
        self._outbox.send(message)
        return waiter

    def close(self, timeout: float | None = None) -> None:
        """End the child; reads in flight fail (called off the loop is fine at the end)."""
        self._closed = True
        process, self.process = self.process, None
        if process is not None:
            with contextlib.suppress(ValueError, RuntimeError):  # the loop may be closed
                self._loop.remove_reader(process.sock.fileno())
                self._loop.remove_writer(process.sock.fileno())
            process.close(timeout)
        self._fail(ReaderGone("the server is shutting down"))

    # ---------------------------------------------------------------- the socket
    def _attach(self, process: ReaderProcess) -> None:
        process.sock.setblocking(False)
        self.process = process
        self._frames, self._outbox = Frames(), Outbox(self._loop, process.sock)
        self._loop.add_reader(process.sock.fileno(), self._readable)
        waiting, self._waiting = self._waiting, []
        for message, waiter in waiting:
            self._in_flight.append(waiter)
            self._outbox.send(message)

    def _readable(self) -> None:
        assert self.process is not None
        try:
            data = self.process.sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._died()
            return
        for payload in self._frames.feed(data):
            waiter = self._in_flight.popleft()
            if waiter.done():  # its client left
                continue
            try:
                waiter.set_result(decode_answer(payload))
            except Exception as e:
                waiter.set_exception(e)

    def _fail(self, error: Exception) -> None:
        while self._in_flight:
            waiter = self._in_flight.popleft()
            if not waiter.done():
                waiter.set_exception(error)
        waiting, self._waiting = self._waiting, []
        for _, waiter in waiting:
            if not waiter.done():
                waiter.set_exception(error)

    def _died(self) -> None:
        """The child is gone: the reads it held fail; another one starts off the loop."""
        process, self.process = self.process, None
        assert process is not None
        self._loop.remove_reader(process.sock.fileno())
        self._loop.remove_writer(process.sock.fileno())
        code = process.close(0)
        logger.error("the reader process exited (code %s): starting another", code)
        self._fail(ReaderGone("the reader process exited: the read is not answered; "
                              "another one starts"))
        self._restart()

    def _restart(self) -> None:
        self._starting = True

        def started(task: asyncio.Future[ReaderProcess]) -> None:
            self._starting = False
            error = task.exception()
            if error is not None:
                logger.error("starting another reader process failed: %s", error)
                self._fail(error if isinstance(error, Exception) else ReaderGone(str(error)))
            elif self._closed:
                task.result().close()
            else:
                self._attach(task.result())

        self._loop.run_in_executor(None, ReaderProcess.started, self._root).add_done_callback(
            started)


# ---------------------------------------------------------------- the child's end
def serve_reader(sock: socket.socket, root: Path) -> None:
    """The child: open a follower, then answer reads until the end of the pipe: every read
    waiting after one catch-up, each answer sent as it is ready."""
    try:
        ledger = Ledger.open(root, readonly=True)
    except BaseException as e:
        sock.sendall(frame(_error(e)))
        return
    # what opening loaded lives as long as the process: out of the collector's sight
    gc.collect()
    gc.freeze()
    sock.sendall(frame(_READY))
    inbox = _Inbox(sock)
    try:
        while True:
            waiting = inbox.take()
            if not waiting:
                return
            try:
                ledger.catch_up()
                failed: BaseException | None = None
            except BaseException as e:  # every read taken gets it
                failed = e
            for payload in waiting:
                sock.sendall(frame(_answer(ledger, payload, failed)))
    except OSError:
        return  # the server's end is gone
    finally:
        ledger.close()


#: How long the child polls for the next read before it sleeps in the kernel, while reads come
#: that often. A sleeping process woken by a read costs more than the read's own wait: at one
#: connection the child answered a group's hour 380 times a second sleeping between reads and
#: 550 polling 2 ms (on a shared 2-core VM), as a plain server answering on its own event loop
#: does. It polls only while the last wait was shorter than this: a read now and then finds it
#: asleep, so polling costs at most this much CPU per read, and only when it pays.
POLL_S = 0.002


class _Inbox:
    """The reads the server sent, taken as many at a time as the pipe holds."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._frames = Frames()
        self._last_wait_s = 0.0

    def take(self) -> list[bytes]:
        """Every read waiting, at least one ([] at the end of the pipe): polled for while
        they come often (`POLL_S`), else waited for in the kernel."""
        sock, feed = self._sock, self._frames.feed
        started = time.perf_counter()
        poll_until = started + POLL_S if self._last_wait_s < POLL_S else started
        taken: list[bytes] = []
        while True:
            if taken or time.perf_counter() < poll_until:
                try:
                    data = sock.recv(1 << 20, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    if taken:
                        break
                    continue
            else:
                data = sock.recv(1 << 20)
            if not data:
                return []
            taken.extend(feed(data))
        self._last_wait_s = time.perf_counter() - started
        return taken


def _answer(ledger: Ledger, payload: bytes, failed: BaseException | None) -> bytes:
    if failed is not None:
        return _error(failed)
    try:
        fn, args = pickle.loads(payload)
        return _JSON + encode_json(fn(ledger, *args))
    except BaseException as e:  # the read's own error; the child goes on
        return _error(e)


def main(argv: Sequence[str]) -> None:
    # the server ends it (the end of its pipe): a terminal's ^C or a service manager's SIGTERM
    # to the whole group must not end it before the server stops asking
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s offset-ledger reader: %(message)s")
    fd, root = int(argv[1]), Path(argv[2])
    with socket.socket(fileno=fd) as sock:
        serve_reader(sock, root)


if __name__ == "__main__":
    main(sys.argv)
