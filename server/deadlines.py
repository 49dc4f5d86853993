"""Deadlines of body reads (`--body-timeout`): one sweep a fraction of the timeout apart cancels
the reads that passed theirs, instead of a timer per request. `asyncio.timeout` per request (a
timer handle, the task's cancellation bookkeeping) was a fifth of the event loop's time at 64
connections; watching a read costs a dict entry. A read ends at most a quarter of the timeout
(at most 1 s) after its deadline."""

from __future__ import annotations

import asyncio


class Deadlines:
    """The body reads of one event loop and when each must have ended."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._loop = loop
        self._every_s = min(1.0, timeout_s / 4)
        self._due: dict[asyncio.Task[object], float] = {}
        self._expired: set[asyncio.Task[object]] = set()
        self._sweeping: asyncio.TimerHandle | None = None

    def watch(self) -> asyncio.Task[object]:
        """Start the current task's deadline (call right before its read)."""
        task = asyncio.current_task(self._loop)
        assert task is not None, "a body is read in a task"
        self._due[task] = self._loop.time() + self.timeout_s
        if self._sweeping is None:
            self._sweeping = self._loop.call_later(self._every_s, self._sweep)
        return task

    def expired(self, task: asyncio.Task[object]) -> bool:
        """Whether the cancellation `task` got was its deadline's (then it is taken back, so
        the task answers 408 and goes on)."""
        if task not in self._expired:
            return False
        self._expired.discard(task)
        task.uncancel()
        return True

    def forget(self, task: asyncio.Task[object]) -> None:
        """The read ended (or failed): no deadline any more."""
        self._due.pop(task, None)
        self._expired.discard(task)

    def _sweep(self) -> None:
        now = self._loop.time()
        for task, due in list(self._due.items()):
            if due <= now:
                del self._due[task]
                self._expired.add(task)
                task.cancel()
        self._sweeping = (self._loop.call_later(self._every_s, self._sweep) if self._due
                          else None)
