"""The server's writer runs in a process of its own (server/writer_process.py).

- Random command streams (every rule, malformed lines, per-command actors, denials and
  backfill) written through the writer process answer and log exactly what the same batches
  written in process do, whether each batch waits for the last one's answer or all are sent
  at once (as a busy server sends them), when the writer takes those waiting together as one
  write.
- kill -9 of the writer process while clients commit: every acknowledged commit is in the log,
  the requests in flight get a 503, and the server starts another writer (which recovers the
  log) and goes on taking commits; the restart is counted in /metrics.
- SIGTERM to the server's whole process group (a service manager's stop): the writer process
  waits to be told, so the server stops cleanly (exit 0) and nothing acknowledged is lost.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest
import urllib3
from hypothesis import given
from hypothesis import strategies as st

from ledger import Ledger
from ledger.commands.command import Command, from_obj
from ledger.errors import InvalidInput, LedgerError
from server.client import Unavailable
from server.writer_process import WriterProcess, Written, encode_batch, error_of, results_of
from tests.server.conftest import Server, child_pid, wait_for
from tests.support.strategies import property_settings, streams


def _decoded(lines: list[dict]) -> list[Command | LedgerError]:
    out: list[Command | LedgerError] = []
    for line in lines:
        try:
            out.append(from_obj(line))
        except LedgerError as e:
            out.append(e)
    return out


@property_settings(share=0.05)
@given(lines=streams(max_size=80), data=st.data())
def test_batches_through_the_writer_process_answer_and_log_as_in_process(
        tmp_path_factory, lines: list[dict], data: st.DataObject) -> None:
    commands = _decoded(lines)
    n = len(commands)
    actors = data.draw(st.lists(st.sampled_from([None, "ops", "k8s-job"]), min_size=n,
                                max_size=n))
    denied = data.draw(st.none() | st.lists(st.sampled_from([None, None, "group"]),
                                            min_size=n, max_size=n))
    backfill = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(n - 1, 1)), max_size=4))))
    bounds = [0, *[c for c in cuts if c < n], n]
    batches = [slice(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if a < b]

    pipelined = data.draw(st.booleans())
    there, here = tmp_path_factory.mktemp("process"), tmp_path_factory.mktemp("in_process")
    writer = WriterProcess(there, data.draw(st.sampled_from([1, 16, 65_536])))
    try:
        if pipelined:
            answers = writer.write_pipelined([encode_batch(
                commands[s], actors[s], None if denied is None else denied[s], backfill[s])
                for s in batches])
            through = [results_of(a) if isinstance(a, Written) else error_of(a)
                       for a in answers]
        else:
            through = [writer.write(commands[s], actors[s],
                                    None if denied is None else denied[s], backfill[s])[0]
                       for s in batches]
    finally:
        writer.close(60)
    with Ledger.open(here) as led:
        direct = [led.submit_decoded(commands[s], actor=actors[s],
                                     denied=None if denied is None else denied[s],
                                     backfill=backfill[s]) for s in batches]
    assert through == direct
    with Ledger.open(there, readonly=True) as a, Ledger.open(here, readonly=True) as b:
        assert _stamped(a, lines) == _stamped(b, lines)


def _stamped(led: Ledger, lines: list[dict]) -> list[dict]:
    """The log, the times the clock stamped (a denied sender's event, an append's store time:
    not its line's ts) left out: the two ledgers wrote them at different moments."""
    given = max(line["ts"] for line in lines)

    def time(ms: int | None) -> int | str | None:
        return "clock" if ms is not None and ms > given else ms

    return [{**e, "ts": time(e["ts"]), "store_ts": time(e["store_ts"])}
            for e in led.log.read().to_pylist()]


def test_a_write_the_child_refuses_is_raised_with_its_type(tmp_path: Path) -> None:
    """An error of the child's ledger reaches the server as the same exception (the route
    maps it to its status); the child goes on."""
    writer = WriterProcess(tmp_path, 65_536)
    try:
        assert writer.generations("nosuchgroup", None) == []
        with pytest.raises(InvalidInput, match="invalid group 'bad group'"):
            writer.generations("bad group", None)
        results, _ = writer.write(_decoded([{"op": "commit", "group": "g", "topic": "t",
                                                "queue_id": 0, "offset": 3}]), [None], None,
                                     [False])
        assert results[0].seq == 0 and results[0].error is None
    finally:
        writer.close(60)


def test_batches_waiting_together_are_one_write(tmp_path: Path) -> None:
    """Batches that reach the writer together are written as one (one fsync): the first
    batch's answer counts the commands of all of them, the others 0; up to the limit."""
    def batch(queue: int) -> bytes:
        return encode_batch(_decoded([{"op": "commit", "group": "g", "topic": "t",
                                       "queue_id": queue, "offset": 3 + i} for i in range(4)]),
                            [None] * 4, None, [False] * 4)

    writer = WriterProcess(tmp_path, 8)
    try:
        answers = writer.write_pipelined([batch(q) for q in range(3)])
    finally:
        writer.close(60)
    assert all(isinstance(a, Written) for a in answers)
    assert [a.write_commands for a in answers] == [8, 0, 4]  # type: ignore[union-attr]
    results = [results_of(a) for a in answers]  # type: ignore[arg-type]
    assert [[r.line for r in rs] for rs in results] == [[1, 2, 3, 4]] * 3
    assert [r.seq for rs in results for r in rs] == list(range(12))


def _writer_pid(data: Path) -> int:
    """The pid of the writer process serving `data` (its command line names the directory)."""
    pid = child_pid(data, "server.writer_process")
    if pid is None:
        raise AssertionError(f"no writer process for {data}")
    return pid


def _committing(server: Server, queue: int, stop: threading.Event, acked: dict[int, int],
               unavailable: list[int]) -> None:
    """Commit increasing offsets until `stop` or the server is gone; what was acknowledged, at
    which seq, and what was answered 503."""
    with server.client(connections=1, timeout_s=60) as c:
        offset = 0
        while not stop.is_set():
            offset += 1
            try:
                r = c.commit("g", "t", queue, offset)
            except Unavailable:
                unavailable.append(offset)
                continue
            except urllib3.exceptions.HTTPError:  # the server is gone
                return
            assert r.accepted and r.seq is not None, r
            acked[offset] = r.seq


def test_kill_9_of_the_writer_process_loses_nothing_acknowledged_and_the_server_goes_on(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = Server(data)
    try:
        lanes: list[dict[int, int]] = [{}, {}, {}, {}]
        unavailable: list[int] = []
        stop = threading.Event()
        threads = [threading.Thread(target=_committing, args=(server, q, stop, lanes[q],
                                                              unavailable)) for q in range(4)]
        for t in threads:
            t.start()
        wait_for(lambda: sum(map(len, lanes)) >= 400, 60, "400 acknowledged commits")
        first = _writer_pid(data)
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: _writer_pid(data) != first if _alive_writer(data) else False, 60,
                 "another writer process")
        before = sum(map(len, lanes))
        wait_for(lambda: sum(map(len, lanes)) >= before + 400, 60, "commits after the kill")
        stop.set()
        for t in threads:
            t.join(60)
        assert "the writer process exited" in server.stderr, server.stderr
        with server.client() as c:
            metrics = c.request("GET", "/metrics").decode()
        assert "offset_ledger_writer_restarts_total 1.0" in metrics, metrics
        assert server.stop() == 0, server.stderr
    finally:
        server.kill()
    with Ledger.open(data, readonly=True) as led:
        log = led.log.read().to_pylist()
    assert [e["seq"] for e in log] == list(range(len(log)))
    for queue, acked in enumerate(lanes):
        for offset, seq in acked.items():
            e = log[seq]
            assert (e["kind"], e["queue_id"], e["offset"]) == ("commit", queue, offset), e


def _alive_writer(data: Path) -> bool:
    try:
        _writer_pid(data)
    except AssertionError:
        return False
    return True


def test_sigterm_to_the_whole_group_stops_cleanly_and_keeps_every_acknowledged_commit(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = Server(data)
    try:
        acked: dict[int, int] = {}
        stop = threading.Event()
        thread = threading.Thread(target=_committing, args=(server, 0, stop, acked, []))
        thread.start()
        wait_for(lambda: len(acked) >= 200, 60, "200 acknowledged commits")
        os.killpg(server.proc.pid, signal.SIGTERM)  # every process of the server at once
        assert server.proc.wait(60) == 0, server.stderr
        stop.set()
        thread.join(60)
        wait_for(lambda: not _alive_writer(data), 30, "the writer process to exit")
    finally:
        server.kill()
    assert "Traceback" not in server.stderr, server.stderr
    assert "the writer process exited" not in server.stderr, server.stderr  # it was told
    with Ledger.open(data, readonly=True) as led:
        log = led.log.read().to_pylist()
    for offset, seq in acked.items():
        assert (log[seq]["kind"], log[seq]["offset"]) == ("commit", offset)
