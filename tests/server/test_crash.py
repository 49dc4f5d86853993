"""kill -9 of a real serve process while clients commit, then a restart, several rounds with a
seed: every acknowledged commit is in the log, nothing is invented (no event that no client
sent), the writer lock is free again after each kill, and `offset-ledger verify` is clean.

granian runs the app in a worker process under its main one: both are SIGKILLed at once (the
server's process group), at a moment the seed picks by counting acknowledgements. Small
segments (`init --segment-events`) make seals and checkpoints happen under the kills."""

from __future__ import annotations

import random
import subprocess
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ledger import Ledger
from tests.server.conftest import Server, wait_for
from tests.tools.crash_harness import _cli_command

SEED = 20261124
ROUNDS = 5
CLIENTS = 8  # committing threads, one key each
GROUP, TOPIC = "crash", "t"
MESSAGES = 2**31 - 1  # MaxOffset far above every offset the clients commit


@dataclass
class Lane:
    """One client's key and what it sent and was told, over every round."""

    queue: int
    next_offset: int = 1
    sent: set[int] = field(default_factory=set)
    acked: dict[int, int] = field(default_factory=dict)  # offset -> the seq its answer named
    pulls_sent: int = 0
    failure: AssertionError | None = None

    def run(self, server: Server, stop: threading.Event, acks: list[int]) -> None:
        """Commit increasing offsets (a pull now and then) until the server dies or `stop`."""
        try:
            with server.client(connections=1, timeout_s=30) as c:
                while not stop.is_set():
                    if self.next_offset % 7 == 0:
                        self.pulls_sent += 1
                        c.pull(GROUP, TOPIC, self.queue, client=f"c{self.queue}", max=4)
                    offset = self.next_offset
                    self.next_offset += 1 + offset % 3
                    self.sent.add(offset)
                    r = c.commit(GROUP, TOPIC, self.queue, offset)
                    assert r.accepted and r.seq is not None, r  # increasing: never refused
                    self.acked[offset] = r.seq
                    acks.append(offset)
        except AssertionError as e:  # reported by the test
            self.failure = e
        except Exception:  # the server was killed: what was in flight stays unknown
            return


def _log(data: Path) -> list[dict]:
    with Ledger.open(data, readonly=True) as led:
        return led.log.read().to_pylist()


def _check(log: list[dict], lanes: list[Lane], seed: int, when: str) -> None:
    """Every acknowledged commit at its seq; no commit nor pull that no client sent."""
    where = f"(seed {seed}, {when})"
    assert [e["seq"] for e in log] == list(range(len(log))), f"seq gap {where}"
    by_queue = {lane.queue: lane for lane in lanes}
    commits = Counter((e["queue_id"], e["offset"]) for e in log if e["kind"] == "commit")
    assert max(commits.values(), default=1) == 1, f"a commit logged twice {where}"
    for lane in lanes:
        for offset, seq in lane.acked.items():
            assert seq < len(log), f"acknowledged commit {lane.queue}:{offset} lost {where}"
            e = log[seq]
            assert (e["kind"], e["queue_id"], e["offset"]) == ("commit", lane.queue, offset), \
                f"acknowledged commit {lane.queue}:{offset} is not at seq {seq} {where}: {e}"
    for queue, offset in commits:
        assert offset in by_queue[queue].sent, f"invented commit {queue}:{offset} {where}"
    pulls = Counter(e["queue_id"] for e in log if e["kind"] == "pull")
    for queue, n in pulls.items():
        assert n <= by_queue[queue].pulls_sent, f"invented pulls on queue {queue} {where}"
    kinds = {e["kind"] for e in log}
    assert kinds <= {"queue_append", "group_config", "initial", "pull", "commit"}, kinds


def test_sigkill_while_clients_commit_loses_nothing_acknowledged(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    data = tmp_path / "data"
    cli = _cli_command()
    subprocess.run([*cli, "--data-dir", str(data), "init", "--segment-events", "500"],
                   check=True, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    lanes = [Lane(q) for q in range(CLIENTS)]
    server = Server(data)
    with server.client() as c:
        for q in range(CLIENTS):
            c.request("POST", "/v1/queues/append", {"topic": TOPIC, "queue": q,
                                                    "count": MESSAGES})
        c.request("PUT", f"/v1/groups/{GROUP}", {"initial": "earliest"})
    kills = 0
    for round_no in range(ROUNDS):
        acks: list[int] = []
        stop = threading.Event()
        threads = [threading.Thread(target=lane.run, args=(server, stop, acks))
                   for lane in lanes]
        for t in threads:
            t.start()
        target = rng.randint(20, 1500)
        try:
            wait_for(lambda acks=acks, threads=threads, target=target: len(acks) >= target
                     or not any(t.is_alive() for t in threads), 120, f"{target} acknowledgements")
            server.kill()
            kills += 1
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert [lane.failure for lane in lanes if lane.failure] == []
        when = f"after kill {round_no + 1}, {sum(len(lane.acked) for lane in lanes)} acked"
        _check(_log(data), lanes, SEED, when)  # a reader, before any recovery
        if round_no % 2 == 0:  # the writer lock is free again; recovery runs here
            Ledger.open(data).close()
            _check(_log(data), lanes, SEED, when + ", recovered")
        server = Server(data)  # (on odd rounds the server itself recovers)
    try:
        with server.client() as c:  # the restarted server takes commits where they left off
            for lane in lanes:
                offset = lane.next_offset
                lane.sent.add(offset)
                r = c.commit(GROUP, TOPIC, lane.queue, offset)
                assert r.accepted, r
                lane.acked[offset] = r.seq  # type: ignore[assignment]
        assert server.stop() == 0, server.stderr
    finally:
        server.kill()
    assert kills == ROUNDS
    assert sum(len(lane.acked) for lane in lanes) > ROUNDS * 20
    log = _log(data)
    _check(log, lanes, SEED, "at the end")
    with Ledger.open(data, readonly=True) as led:
        led.catch_up()
        for lane in lanes:  # the view agrees with the log: the last commit of each key
            last = max(o for (q, o) in ((e["queue_id"], e["offset"]) for e in log
                                        if e["kind"] == "commit") if q == lane.queue)
            assert led.committed(GROUP, TOPIC, lane.queue) == last
    done = subprocess.run([*cli, "--data-dir", str(data), "verify"], capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and "0 problem(s)" in done.stdout, done.stdout + done.stderr
