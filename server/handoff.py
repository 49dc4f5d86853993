"""Answers handed from a worker thread (the writer, the reader) to the event loop: a batch of
them in one `call_soon_threadsafe`, one wake-up of the loop however many requests it answers,
each request waiting on one of the loop's own futures (none of `concurrent.futures`' locks and
conditions per request)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

logger = logging.getLogger(__name__)

#: A waiter and what it gets: a value, or an exception to raise.
Answer = tuple[asyncio.Future[Any], Any, BaseException | None]


def hand_over(loop: asyncio.AbstractEventLoop, answers: list[Answer]) -> None:
    """From a worker thread: `answers` delivered on `loop` in one callback."""
    try:
        loop.call_soon_threadsafe(_deliver, answers)
    except RuntimeError:  # the loop is closed: nobody waits any more
        logger.warning("%d answer(s) after the event loop closed", len(answers))


def _deliver(answers: list[Answer]) -> None:
    """On the loop: each waiter gets its answer; one whose request was cancelled (its client
    left) is passed over."""
    for waiter, value, error in answers:
        if waiter.done():
            continue
        if error is not None:
            waiter.set_exception(error)
        else:
            waiter.set_result(value)
