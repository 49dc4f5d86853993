"""The group committer hands answers back to the event loop: a request whose client left
(its waiter cancelled) is passed over, its commands durable all the same, and the writer
goes on answering the others."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ledger import Commit, Ledger
from server.committer import Committer


def test_a_request_whose_client_left_is_written_and_the_writer_goes_on(tmp_path: Path) -> None:
    errors: list[dict] = []

    async def run() -> list:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: errors.append(context))
        committer = Committer(tmp_path, loop, batch_commands_max=64,
                              pending_commands_max=1_000)
        try:
            gone = committer.submit([Commit(group="g", topic="t", queue_id=0, offset=5)], None)
            gone.cancel()  # the client left before its answer
            answers = [await asyncio.wait_for(committer.submit(
                [Commit(group="g", topic="t", queue_id=q, offset=7)], None), 30) for q in (0, 1)]
        finally:
            await committer.stop(30)
        return answers

    answers = asyncio.run(run())
    assert errors == []  # no answer was set on the cancelled waiter
    assert [[r.error for r in a] for a in answers] == [[None], [None]]
    with Ledger.open(tmp_path) as led:
        rows = led.history(group="g").select(["queue_id", "offset", "prev_offset"]).to_pylist()
    assert [tuple(r.values()) for r in rows] == [(0, 5, None), (0, 7, 5), (1, 7, None)]
