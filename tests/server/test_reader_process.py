"""The routes' reads run in a process of their own (server/reader_process.py): each read gets
its own answer or error in the order sent, an exit raised inside a read does not end the
child, a child that dies fails only the reads it held and another one answers the next, a read
sees every commit acknowledged before it, and the server's stop ends the child."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import urllib3

from ledger import InvalidInput, Ledger
from server import answers
from server.client import Unavailable
from server.reader_process import ReaderGone, ReaderLink
from tests.server.conftest import Server, child_pid, raw, wait_for


def _ledger_with_commits(root: Path, n: int = 3) -> None:
    with Ledger.open(root) as led:
        for offset in range(1, n + 1):
            led.commit("g", "t", 0, offset)


def test_reads_answer_in_order_each_with_its_answer_or_error(tmp_path: Path) -> None:
    _ledger_with_commits(tmp_path)

    async def run() -> list[Any]:
        link = ReaderLink(tmp_path, asyncio.get_running_loop())
        try:
            sent = [link.read(answers.progress, ("g", None)),
                    link.read(answers.history, ("g", None, None, None, "not a time", None,
                                                None, True)),
                    link.read(sys.exit, ()),  # an exit inside a read: the child goes on
                    link.read(answers.health, ())]
            return await asyncio.gather(*sent, return_exceptions=True)
        finally:
            link.close(timeout=30)

    progress, bad, stopped, health = asyncio.run(run())
    assert [row["committed_offset"] for row in json.loads(progress)] == [3]
    assert isinstance(bad, InvalidInput) and "not a time" in str(bad), bad
    assert isinstance(stopped, RuntimeError) and "the read was stopped" in str(stopped), stopped
    assert json.loads(health) == {"ok": True, "next_seq": 3}


def test_a_dead_reader_fails_the_reads_it_held_and_another_answers_the_next(
        tmp_path: Path) -> None:
    _ledger_with_commits(tmp_path)

    async def run() -> tuple[BaseException | bytes, bytes, int, int]:
        link = ReaderLink(tmp_path, asyncio.get_running_loop())
        try:
            assert link.process is not None
            first_pid = link.process.pid
            await link.read(answers.health, ())
            # a read the child holds when it dies: stopped inside it (SIGSTOP), then killed
            os.kill(first_pid, signal.SIGSTOP)
            held = link.read(answers.health, ())
            await asyncio.sleep(0.1)
            os.kill(first_pid, signal.SIGKILL)
            lost = await asyncio.gather(held, return_exceptions=True)
            answer = await asyncio.wait_for(link.read(answers.health, ()), 60)
            assert link.process is not None
            return lost[0], answer, first_pid, link.process.pid
        finally:
            link.close(timeout=30)

    lost, answer, first_pid, second_pid = asyncio.run(run())
    assert isinstance(lost, ReaderGone) and "the reader process exited" in str(lost), lost
    assert json.loads(answer) == {"ok": True, "next_seq": 3}
    assert second_pid != first_pid


def test_closing_fails_what_waits_and_ends_the_child(tmp_path: Path) -> None:
    _ledger_with_commits(tmp_path)

    async def run() -> tuple[Any, int]:
        link = ReaderLink(tmp_path, asyncio.get_running_loop())
        assert link.process is not None
        proc = link.process.proc
        os.kill(proc.pid, signal.SIGSTOP)  # the read stays in flight until the close
        waiting = link.read(answers.health, ())
        os.kill(proc.pid, signal.SIGCONT)
        link.close(timeout=30)
        after = link.read(answers.health, ())
        results = await asyncio.gather(waiting, after, return_exceptions=True)
        return results, proc.wait(30)

    (waiting, after), code = asyncio.run(run())
    assert isinstance(after, ReaderGone) and "shutting down" in str(after), after
    # the read sent before the close was answered, or failed as shutting down: never lost
    assert (isinstance(waiting, bytes) and json.loads(waiting)["ok"]) or \
        isinstance(waiting, ReaderGone), waiting
    assert code == 0


def _reader_pid(data: Path) -> int | None:
    return child_pid(data, "server.reader_process")


def test_every_read_sees_the_commits_acknowledged_before_it(tmp_path: Path) -> None:
    server = Server(tmp_path / "data")
    try:
        with server.client() as c:
            for offset in range(1, 41):
                assert c.commit("g", "t", 0, offset).accepted
                [row] = c.progress("g")
                assert row["committed_offset"] == offset, row
                assert [e["offset"] for e in c.history(group="g", limit=1)] == [offset]
    finally:
        server.kill()


def test_kill_9_of_the_reader_process_fails_only_its_reads_and_commits_go_on(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = Server(data)
    try:
        acked: list[int] = []
        stop = threading.Event()

        def committing() -> None:
            with server.client(connections=1, timeout_s=60) as c:
                offset = 0
                while not stop.is_set():
                    offset += 1
                    try:
                        assert c.commit("g", "t", 0, offset).accepted
                    except Unavailable as e:
                        raise AssertionError("a commit was refused while the reader "
                                             "restarted") from e
                    except urllib3.exceptions.HTTPError:
                        return
                    acked.append(offset)

        thread = threading.Thread(target=committing)
        thread.start()
        wait_for(lambda: len(acked) >= 100, 60, "100 acknowledged commits")
        first = _reader_pid(data)
        assert first is not None
        os.kill(first, signal.SIGKILL)
        statuses: list[int] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status = raw(server, "GET", "/v1/groups/g/progress")[0]
            statuses.append(status)
            if status == 200 and _reader_pid(data) not in (None, first):
                break
        else:
            raise AssertionError(f"no answer from another reader process: {statuses[-5:]}")
        assert set(statuses) <= {200, 503}, statuses
        before = len(acked)
        wait_for(lambda: len(acked) >= before + 100, 60, "commits after the kill")
        stop.set()
        thread.join(60)
        assert not thread.is_alive()
        assert "the reader process exited" in server.stderr, server.stderr
        with server.client() as c:
            [row] = c.progress("g")
        assert row["committed_offset"] == acked[-1]
        assert server.stop() == 0, server.stderr
        wait_for(lambda: _reader_pid(data) is None, 30, "the reader process to exit")
    finally:
        server.kill()
    assert "Traceback" not in server.stderr, server.stderr
