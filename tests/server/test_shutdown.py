"""SIGTERM / SIGINT while requests are in flight: each request the server took is answered,
the process exits 0, and the view on disk is flushed (its position is the log's end, its
offsets the last acknowledged commits), so a reader afterwards sees everything acknowledged."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import duckdb
import pytest

from ledger import Ledger
from tests.server.conftest import Server, wait_for

CLIENTS = 8
BATCH = 2000  # commits per request: requests that take a while, so some are in flight
TOPIC, GROUP = "t", "g"


def _client(server: Server, queue: int, acked: list[tuple[int, int]],
            problems: list[AssertionError], stop: threading.Event) -> None:
    """Batches of increasing commits on one queue until the server stops answering."""
    offset = 0
    try:
        with server.client(connections=1, timeout_s=60) as c:
            while not stop.is_set():
                batch = [{"op": "commit", "group": GROUP, "topic": TOPIC, "queue_id": queue,
                          "offset": offset + i + 1} for i in range(BATCH)]
                results = c.commands(batch)
                assert all("error" not in r for r in results), results[:2]
                offset += BATCH
                acked.append((queue, offset))
    except AssertionError as e:  # reported by the test
        problems.append(e)
    except Exception:  # refused after the stop: this request was not taken
        return


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_answers_what_is_in_flight_exits_0_and_flushes_the_view(
        tmp_path: Path, sig: int) -> None:
    data = tmp_path / "data"
    server = Server(data)
    try:
        with server.client() as c:
            for q in range(CLIENTS):
                c.request("POST", "/v1/queues/append", {"topic": TOPIC, "queue": q,
                                                        "count": 2**31 - 1})
        acked: list[tuple[int, int]] = []
        problems: list[AssertionError] = []
        stop = threading.Event()
        threads = [threading.Thread(target=_client, args=(server, q, acked, problems, stop))
                   for q in range(CLIENTS)]
        for t in threads:
            t.start()
        wait_for(lambda: len(acked) >= 3 * CLIENTS, 120, "the clients to be under way")
        before = len(acked)
        code = server.stop(sig)
        answered_after_signal = len(acked) - before
        stop.set()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        assert problems == []
        assert answered_after_signal >= 1  # 8 clients always have a request in flight
    finally:
        server.kill()
    assert code == 0, server.stderr
    assert "Traceback" not in server.stderr, server.stderr
    last: dict[int, int] = {}
    for queue, offset in acked:
        last[queue] = max(last.get(queue, 0), offset)

    with Ledger.open(data, readonly=True) as led:
        log = led.log.read(columns=["seq", "kind", "queue_id", "offset"]).to_pylist()
    logged: dict[int, Any] = {}
    for e in log:
        if e["kind"] == "commit":
            logged[e["queue_id"]] = e["offset"]
    # every request the server took was answered: what the log holds is what was acknowledged
    assert logged == last, (logged, last)

    con = duckdb.connect(str(data / "view.duckdb"), read_only=True)
    try:
        [(position,)] = con.execute("SELECT max(next_seq) FROM view_position").fetchall()
        view = dict(con.execute("SELECT queue_id, committed_offset FROM offsets "
                                "WHERE consumer_group = ?", [GROUP]).fetchall())
    finally:
        con.close()
    assert position == len(log)  # flushed at the stop, not caught up later by a reader
    assert view == last
