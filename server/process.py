"""The worker process and its signals (DESIGN.md, Security rules).

granian runs the app in a worker process under its main process. Three things it does not do:
- the worker outlives a `kill -9` of the main process, still serving and holding the writer
  lock, so a restart fails: the worker asks the kernel for SIGTERM when its parent dies
  (Linux PR_SET_PDEATHSIG) and checks that the parent is still the one that started it;
- SIGHUP makes granian respawn the worker, which cannot take the writer lock while the old one
  holds it, and the server exits 1: the main process forwards SIGHUP to the worker instead,
  which reloads the tokens file;
- on SIGTERM granian waits for requests in flight, a runaway SQL query among them: the worker
  interrupts running queries first, then stops as granian does on SIGINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("offset_ledger.server")
PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None) -> None:
    """SIGTERM to this process when its parent exits (Linux); at once if it has already."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            logger.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGTERM)  # the parent died before the request took effect


def worker_signals(loop: asyncio.AbstractEventLoop, *, before_stop: Callable[[], None],
                   on_hangup: Callable[[], None]) -> None:
    """In the worker, after granian set its own handlers: SIGTERM runs `before_stop`, then
    stops the worker through granian's SIGINT handler (the same graceful stop); SIGHUP runs
    `on_hangup` and never stops it."""
    def stop() -> None:
        try:
            before_stop()
        finally:
            os.kill(os.getpid(), signal.SIGINT)

    loop.add_signal_handler(signal.SIGTERM, stop)
    loop.add_signal_handler(signal.SIGHUP, on_hangup)


def forward_hangup(server: Any) -> None:
    """In granian's main process: SIGHUP goes to the workers (which reload their tokens)
    instead of respawning them (granian reads `signal_handler_reload` when it starts)."""
    def forward(*_: object) -> None:
        for worker in list(server.wrks):
            pid = worker.inner.pid
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGHUP)

    server.signal_handler_reload = forward
