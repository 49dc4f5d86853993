"""The read side runs the routes' reads on one reader thread: reads queued together are answered
after one catch-up, each with its own answer or error, what a writer acknowledged before a read
was taken is in it, a read ready early is not held behind a slow one, and a read whose client
left is passed over."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ledger import Ledger
from server.committer import Stopping
from server.reads import ReadSide


def _ledger_with_a_commit(root: Path) -> None:
    with Ledger.open(root) as led:
        led.commit("g", "t", 0, 1)


def test_reads_queued_together_each_get_their_answer_or_error(tmp_path: Path) -> None:
    _ledger_with_a_commit(tmp_path)
    catch_ups: list[int] = []

    async def run() -> list[Any]:
        reads = ReadSide(tmp_path, asyncio.get_running_loop())
        gate = threading.Event()
        real = reads._ledger.catch_up

        def counted() -> int:
            catch_ups.append(1)
            return real()

        reads._ledger.catch_up = counted  # type: ignore[method-assign]
        try:
            # the first read holds the reader until the others are queued behind it
            first = reads.run(lambda led: gate.wait(30) and led.log.next_seq)
            await asyncio.sleep(0.05)
            queued = [reads.run(lambda led, q=q: (q, led.committed("g", "t", 0)))
                      for q in range(5)]
            bad = reads.run(lambda led: led.history(since_ms="not a time"))
            stopped = reads.run(lambda led: sys.exit(3))  # the reader thread must go on
            after = reads.run(lambda led: led.log.next_seq)
            gate.set()
            answers = await asyncio.gather(first, *queued, bad, stopped, after,
                                           return_exceptions=True)
        finally:
            await asyncio.to_thread(reads.close)
        return answers

    answers = asyncio.run(run())
    assert answers[0] == 1
    assert answers[1:6] == [(q, 1) for q in range(5)]
    assert isinstance(answers[6], Exception) and "not a time" in str(answers[6])
    assert isinstance(answers[7], RuntimeError) and "SystemExit(3)" in str(answers[7])
    assert answers[8] == 1
    assert len(catch_ups) == 2  # the first read's, then one for the nine queued behind it


def test_a_read_sees_what_was_acknowledged_before_it(tmp_path: Path) -> None:
    _ledger_with_a_commit(tmp_path)

    async def run() -> list[int | None]:
        reads = ReadSide(tmp_path, asyncio.get_running_loop())
        seen = []
        try:
            with Ledger.open(tmp_path) as writer:
                for offset in range(2, 12):
                    writer.commit("g", "t", 0, offset)
                    seen.append(await reads.run(lambda led: led.committed("g", "t", 0)))
        finally:
            await asyncio.to_thread(reads.close)
        return seen

    assert asyncio.run(run()) == list(range(2, 12))


def test_a_read_ready_early_is_not_held_behind_a_slow_one(tmp_path: Path) -> None:
    _ledger_with_a_commit(tmp_path)
    slow_s = 0.2

    async def run() -> tuple[float, float]:
        reads = ReadSide(tmp_path, asyncio.get_running_loop())
        gate = threading.Event()
        try:
            blocker = reads.run(lambda led: gate.wait(30))
            await asyncio.sleep(0.05)
            fast = reads.run(lambda led: led.log.next_seq)
            slow = reads.run(lambda led: time.sleep(slow_s))
            gate.set()
            await blocker
            started = time.perf_counter()
            await fast
            fast_s = time.perf_counter() - started
            await slow
            return fast_s, time.perf_counter() - started
        finally:
            await asyncio.to_thread(reads.close)

    fast_s, slow_done_s = asyncio.run(run())
    assert slow_done_s >= slow_s
    assert fast_s < slow_s / 2


def test_a_read_whose_client_left_is_passed_over(tmp_path: Path) -> None:
    _ledger_with_a_commit(tmp_path)
    ran: list[str] = []
    errors: list[dict] = []

    async def run() -> Any:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: errors.append(context))
        reads = ReadSide(tmp_path, loop)
        gate = threading.Event()
        try:
            blocker = reads.run(lambda led: gate.wait(30))
            await asyncio.sleep(0.05)
            gone = reads.run(lambda led: ran.append("gone"))
            gone.cancel()  # its client left while it waited
            kept = reads.run(lambda led: led.committed("g", "t", 0))
            gate.set()
            await blocker
            return await asyncio.wait_for(kept, 30)
        finally:
            await asyncio.to_thread(reads.close)

    assert asyncio.run(run()) == 1
    assert ran == [] and errors == []


def test_a_closed_read_side_runs_nothing_more(tmp_path: Path) -> None:
    _ledger_with_a_commit(tmp_path)

    async def run() -> None:
        reads = ReadSide(tmp_path, asyncio.get_running_loop())
        assert await reads.run(lambda led: led.log.next_seq) == 1
        await asyncio.to_thread(reads.close)
        with pytest.raises(Stopping, match="shutting down"):
            await asyncio.wait_for(reads.run(lambda led: led.log.next_seq), 5)

    asyncio.run(run())
