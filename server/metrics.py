"""Prometheus metrics (prometheus_client): the ledger's gauges, read from the follower at each
scrape (lag, time lag, committed offsets per key; bounds per queue; each group's lag health as
1 OK, 2 WARN, 3 ERR), and the server's own histograms (request latency per route, batch size,
batch and append latency, commits refused per group and reason, the garbage collector's
pauses)."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from server.reads import ReadSide

#: offset_ledger_group_status: the lag-health status of a group as a number.
STATUS_VALUE = {"OK": 1, "WARN": 2, "ERR": 3, "STOP": 3, "STALL": 3, "REWIND": 3}
KEY_LABELS = ("consumer_group", "topic", "queue_id")


class LedgerCollector(Collector):
    """The ledger's state as gauges, caught up with the durable log at each scrape."""

    def __init__(self, reads: ReadSide) -> None:
        self.reads = reads

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self.reads.ledger() as led:
            rows = led.progress_all()
            queues = led.queues()
            health = led.lag()
        lag = GaugeMetricFamily("offset_ledger_lag_messages",
                                "MaxOffset - committed offset (messages)", labels=KEY_LABELS)
        lag_s = GaugeMetricFamily("offset_ledger_lag_seconds",
                                  "How long the message at the committed offset has waited",
                                  labels=KEY_LABELS)
        committed = GaugeMetricFamily("offset_ledger_committed_offset",
                                      "The next offset the group will consume",
                                      labels=KEY_LABELS)
        for r in rows:
            key = [r["consumer_group"], r["topic"], str(r["queue_id"])]
            committed.add_metric(key, r["committed_offset"])
            if r["lag"] is not None:
                lag.add_metric(key, r["lag"])
            if r["lag_ms"] is not None:
                lag_s.add_metric(key, r["lag_ms"] / 1000)
        max_offset = GaugeMetricFamily("offset_ledger_max_offset", "A queue's MaxOffset",
                                       labels=("topic", "queue_id"))
        min_offset = GaugeMetricFamily("offset_ledger_min_offset", "A queue's MinOffset",
                                       labels=("topic", "queue_id"))
        for q in queues:
            max_offset.add_metric([q["topic"], str(q["queue_id"])], q["max_offset"])
            min_offset.add_metric([q["topic"], str(q["queue_id"])], q["min_offset"])
        status = GaugeMetricFamily("offset_ledger_group_status",
                                   "Lag health of a group: 1 OK, 2 WARN, 3 ERR",
                                   labels=("consumer_group",))
        for g in health:
            value = STATUS_VALUE.get(g["status"])
            if value is not None:
                status.add_metric([g["consumer_group"]], value)
        yield from (lag, lag_s, committed, max_offset, min_offset, status)


class Metrics:
    """The registry of one server process."""

    def __init__(self, reads: ReadSide) -> None:
        self.registry = CollectorRegistry()
        self.requests = Histogram(
            "offset_ledger_request_seconds", "Time to answer a request", ("route",),
            registry=self.registry)
        self.batch_commands = Histogram(
            "offset_ledger_batch_commands", "Commands per group-commit batch",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384, 65536),
            registry=self.registry)
        self.batch_seconds = Histogram(
            "offset_ledger_batch_seconds", "Time to fold and append a batch, fsync included",
            registry=self.registry)
        self.fsync_seconds = Histogram(
            "offset_ledger_fsync_seconds", "Time to append a batch to the log (write + fsync)",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                     0.25, 1.0), registry=self.registry)
        self.commits_refused = Counter(
            "offset_ledger_commits_refused", "Commits a rule refused since the server started "
            "(refusals append nothing to the log): fenced ones are zombies and clients from "
            "before a reset", ("consumer_group", "reason"), registry=self.registry)
        self.writer_restarts = Counter(
            "offset_ledger_writer_restarts", "Times the writer process died (its batch in hand "
            "unacknowledged) and another one recovered the log", registry=self.registry)
        self.collector_pauses = Histogram(
            "offset_ledger_gc_pause_seconds", "Pauses of Python's cyclic garbage collector, by "
            "generation (every thread waits while it runs)", ("generation",),
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25),
            registry=self.registry)
        self.registry.register(LedgerCollector(reads))
        self._request_children: dict[str, Any] = {}
        self._refused_children: dict[tuple[str, str], Any] = {}

    def request(self, route: str, seconds: float) -> None:
        """A request answered: its route's child of the histogram, looked up once per route."""
        child = self._request_children.get(route)
        if child is None:
            child = self._request_children[route] = self.requests.labels(route)
        child.observe(seconds)

    def watch_collector(self) -> None:
        """Time every collection from now on (gc.callbacks: start and stop, on the thread
        that triggered it, which holds the GIL throughout)."""
        children = [self.collector_pauses.labels(str(g)) for g in range(3)]
        started = [0.0]

        def callback(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                started[0] = time.perf_counter()
            else:
                children[info["generation"]].observe(time.perf_counter() - started[0])

        gc.callbacks.append(callback)

    def batch(self, commands: int, batch_s: float, append_s: float) -> None:
        self.batch_commands.observe(commands)
        self.batch_seconds.observe(batch_s)
        self.fsync_seconds.observe(append_s)

    def writer_restarted(self) -> None:
        self.writer_restarts.inc()

    def commit_refused(self, group: str, reason: str) -> None:
        """A refused commit, counted on its (group, reason) child, looked up once per pair (a
        batch of stale commits refuses thousands: `labels` each time was 5% of a batched
        server's CPU). The children are the counter's own, so the cache holds no more."""
        child = self._refused_children.get((group, reason))
        if child is None:
            child = self._refused_children[(group, reason)] = self.commits_refused.labels(
                group, reason)
        child.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
