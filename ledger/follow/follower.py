"""`follow kafka`: consume every partition of a cluster's offsets topic with confluent-kafka
(librdkafka), hand each batch to a sink, poll the brokers' watermarks, until a signal.

- Resume: the stored positions (the follow group's offsets) say where each partition goes on;
  what came before them is read once more only to rebuild what the follower keeps in memory
  (each group's owners per partition, the queues followed groups commit on), sending nothing.
- A batch: what one `consume` call returns (at most `batch_records` records), decoded and sent
  with the positions it reached; the sink makes it durable whole (one append) before the next.
- Watermarks: every poll interval, once the follower is caught up (every partition read to its
  end, or at most one batch behind with records of the last interval), each followed queue's
  earliest and latest offsets and the newest message's time become queue bounds; so do the
  offsets topic's own (the follow group's lag is the follower's). Never while catching up: a
  poll is stamped now, and the ledger's clock never goes back, so history read after it would
  be recorded late.
- Faults: a broker or server that is down is retried with backoff and one line on stderr; a
  record that cannot be decoded is skipped, counted and logged. `stop` (SIGINT/SIGTERM) ends
  the loop after the batch in hand is durable. `until_idle`: stop once every partition has been
  read to its end and one watermark poll is recorded.

confluent_kafka is imported here only when a follower starts (the `kafka` extra).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ledger.errors import InvalidInput
from ledger.follow.sink import Sink, SinkUnavailable
from ledger.follow.translate import (
    OFFSETS_TOPIC_DEFAULT,
    Translator,
    bounds_commands,
    follow_group,
)
from ledger.limits import check_name
from ledger.timeparse import iso

BATCH_RECORDS_DEFAULT = 20_000
BACKOFF_S_MAX = 30.0
METADATA_TIMEOUT_S = 10.0
NEWEST_TIMEOUT_S = 5.0


@dataclass
class FollowOptions:
    """What `offset-ledger follow kafka` takes (its options without the dashes)."""

    bootstrap_server: str
    cluster: str | None = None
    offsets_topic: str = OFFSETS_TOPIC_DEFAULT
    config: dict[str, str] = field(default_factory=dict)
    poll_interval_s: float = 10.0
    groups: str | None = None
    until_idle: bool = False
    batch_records: int = BATCH_RECORDS_DEFAULT


@dataclass
class FollowStatus:
    """The follower's state as its status line (and the server's metrics) show it."""

    source: str = ""
    lag_records: int | None = None
    polls: int = 0
    batches: int = 0
    changed: int = 0
    errors: int = 0
    counts: dict[str, Any] = field(default_factory=dict)


def parse_config(pairs: list[str]) -> dict[str, str]:
    """`--config KEY=VALUE` librdkafka properties (security.protocol, sasl.*, ssl.* ...)."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise InvalidInput(f"invalid --config {pair!r}: use KEY=VALUE, like "
                               "security.protocol=SASL_SSL")
        out[key.strip()] = value
    return out


def kafka_module() -> Any:
    try:
        import confluent_kafka
    except ImportError:
        raise InvalidInput("following Kafka needs confluent-kafka: pip install "
                           "'offset-ledger[kafka]'") from None
    return confluent_kafka


class _Problems:
    """One line on stderr when a part goes down, one when it is back (not one per retry)."""

    def __init__(self, out: Callable[[str], None]) -> None:
        self.out = out
        self.down: dict[str, str] = {}

    def failed(self, part: str, message: str) -> None:
        if part not in self.down:
            self.out(f"{part} unavailable ({message}): retrying with backoff")
        self.down[part] = message

    def ok(self, part: str) -> None:
        if self.down.pop(part, None) is not None:
            self.out(f"{part} reachable again")


class Follower:
    """One run of the follower; `run()` returns its summary."""

    def __init__(self, options: FollowOptions, sink: Sink, *, stop: threading.Event,
                 out: Callable[[str], None], clock: Callable[[], int],
                 status: FollowStatus | None = None) -> None:
        self.o = options
        self.sink = sink
        self.stop = stop
        self.out = out
        self.clock = clock
        self.status = status or FollowStatus()
        self.problems = _Problems(out)
        self._unmarked: set[tuple[str, int]] = set()
        self.ck = kafka_module()
        if options.groups is not None and not options.groups:
            raise InvalidInput("invalid --groups '': give a glob like 'billing*'")
        check_name(options.offsets_topic, "offsets topic")
        if options.cluster is not None:
            follow_group(options.cluster)

    # ------------------------------------------------------------------ kafka
    def _conf(self, **extra: Any) -> dict[str, Any]:
        # librdkafka logs each failed connection on stderr: its errors reach the one line of
        # `_Problems` through error_cb instead (`--config log_level=6` brings its log back)
        return {"bootstrap.servers": self.o.bootstrap_server, "log_level": 2,
                "error_cb": self._kafka_error, **self.o.config, **extra}

    def _kafka_error(self, err: Any) -> None:
        if err.code() in (self.ck.KafkaError._ALL_BROKERS_DOWN, self.ck.KafkaError._TRANSPORT,
                          self.ck.KafkaError._RESOLVE, self.ck.KafkaError._AUTHENTICATION):
            self.problems.failed("kafka", err.str())

    def _consumer(self, name: str) -> Any:
        try:
            return self.ck.Consumer(self._conf(**{
                "group.id": f"offset-ledger-{name}", "client.id": f"offset-ledger-{name}",
                "enable.auto.commit": False, "enable.auto.offset.store": False,
                "enable.partition.eof": True, "auto.offset.reset": "earliest"}))
        except (self.ck.KafkaException, ValueError, TypeError) as e:
            raise InvalidInput(f"invalid Kafka client settings (--config): {e}") from None

    def _metadata(self, consumer: Any) -> tuple[str, list[int]]:
        """(cluster id, partitions of the offsets topic), once the cluster answers."""
        def ask() -> tuple[str, list[int]]:
            md = consumer.list_topics(self.o.offsets_topic, timeout=METADATA_TIMEOUT_S)
            topic = md.topics.get(self.o.offsets_topic)
            if topic is None or topic.error is not None or not topic.partitions:
                why = topic.error.str() if topic is not None and topic.error else "no partitions"
                raise InvalidInput(f"topic {self.o.offsets_topic!r}: {why}")
            return md.cluster_id or "", sorted(topic.partitions)

        return self._until_up("kafka", ask, (self.ck.KafkaException, InvalidInput))

    def _until_up(self, part: str, call: Callable[[], Any],
                  errors: tuple[type[BaseException], ...]) -> Any:
        """`call()`, retried with backoff (one line when `part` goes down, one when it is
        back) until it answers or a stop comes (`_Stopped`)."""
        backoff = 1.0
        while True:
            try:
                answer = call()
                self.problems.ok(part)
                return answer
            except errors as e:
                self.problems.failed(part, str(e))
            if self.stop.wait(backoff):
                raise _Stopped
            backoff = min(backoff * 2, BACKOFF_S_MAX)

    # ------------------------------------------------------------------ sink
    def _send(self, commands: list[dict[str, Any]], positions: dict[int, int],
              group: str) -> None:
        """A batch to the sink, retried with backoff while it is unavailable. After a failure
        whose outcome is unknown (the answer lost), the stored positions say whether the batch
        was applied: it is not sent twice."""
        backoff = 1.0
        while True:
            try:
                done = self.sink.send(commands)
                self.problems.ok("ledger")
                break
            except SinkUnavailable as e:
                self.problems.failed("ledger", str(e))
            if self.stop.wait(backoff):
                raise _Stopped  # the batch is not durable: the next run reads it again
            backoff = min(backoff * 2, BACKOFF_S_MAX)
            if positions:
                try:
                    stored = self.sink.positions(group, self.o.offsets_topic)
                except SinkUnavailable:
                    continue
                if all(stored.get(p, -1) >= q for p, q in positions.items()):
                    self.problems.ok("ledger")
                    return
        self.status.batches += 1
        self.status.changed += done.get("changed", 0)
        if done.get("errors"):
            self.status.errors += done["errors"]
            self.out(f"{done['errors']} command(s) of a batch refused: {done.get('first_error')}")

    # ------------------------------------------------------------------ the loop
    def run(self) -> dict[str, Any]:
        consumer = self._consumer("follow")
        reader = None
        try:
            try:
                cluster_id, partitions = self._metadata(consumer)
            except _Stopped:
                return {"stopped": "before the cluster answered"}
            cluster = self.o.cluster or cluster_id
            tr = Translator(cluster=cluster, offsets_topic=self.o.offsets_topic,
                            groups=self.o.groups, clock=self.clock, log=self.out)
            self.status.source = tr.source
            try:
                stored = self._stored_positions(tr.group)
            except _Stopped:
                return {"stopped": "before the ledger answered"}
            self._relearn(consumer, tr, partitions, stored)
            tp = self.ck.TopicPartition
            consumer.assign([tp(self.o.offsets_topic, p, stored.get(p, self.ck.OFFSET_BEGINNING))
                             for p in partitions])
            reader = self._consumer("follow-newest")
            with contextlib.suppress(_Stopped):  # a stop while a part was down
                self._loop(consumer, reader, tr, partitions)
            return {"source": tr.source, "cluster": cluster, "follow_group": tr.group,
                    "partitions": len(partitions), "groups": len(tr.groups_seen),
                    "queues": len(tr.followed), "batches": self.status.batches,
                    "changed": self.status.changed, "polls": self.status.polls,
                    "errors": self.status.errors, **tr.counts.as_dict()}
        finally:
            consumer.close()
            if reader is not None:
                reader.close()

    def _stored_positions(self, group: str) -> dict[int, int]:
        return self._until_up("ledger", lambda: self.sink.positions(group, self.o.offsets_topic),
                              (SinkUnavailable,))

    def _relearn(self, consumer: Any, tr: Translator, partitions: list[int],
                 stored: dict[int, int]) -> None:
        """Read each partition up to its stored position again, only to rebuild the owners and
        followed queues (what a run before this one knew)."""
        todo = {p: stored[p] for p in partitions if stored.get(p, 0) > 0}
        if not todo:
            return
        tp = self.ck.TopicPartition
        consumer.assign([tp(self.o.offsets_topic, p, self.ck.OFFSET_BEGINNING) for p in todo])
        while todo and not self.stop.is_set():
            for m in consumer.consume(num_messages=self.o.batch_records, timeout=0.5):
                p = m.partition()
                if p not in todo:
                    continue
                if m.error() is not None:
                    if m.error().code() == self.ck.KafkaError._PARTITION_EOF:
                        todo.pop(p, None)
                    continue
                if m.offset() >= todo[p]:
                    todo.pop(p, None)
                    continue
                tr.learn(p, m.offset(), m.key(), m.value())
                if m.offset() + 1 >= todo[p]:
                    todo.pop(p, None)
        consumer.unassign()

    def _loop(self, consumer: Any, reader: Any, tr: Translator, partitions: list[int]) -> None:
        eof_code = self.ck.KafkaError._PARTITION_EOF
        at_end = dict.fromkeys(partitions, False)
        last_poll = last_status = float("-inf")
        while not self.stop.is_set():
            for m in consumer.consume(num_messages=self.o.batch_records, timeout=0.2):
                err = m.error()
                if err is not None:
                    if err.code() == eof_code:
                        at_end[m.partition()] = True
                    else:
                        self.problems.failed("kafka", err.str())
                    continue
                at_end[m.partition()] = False
                kind, ts = m.timestamp()
                tr.add(m.partition(), m.offset(), m.key(), m.value(),
                       ts if kind != self.ck.TIMESTAMP_NOT_AVAILABLE else None)
            if tr.pending():
                self.problems.ok("kafka")
                commands, positions = tr.take()
                self._send(commands, positions, tr.group)
            idle = all(at_end.values())
            caught_up = idle or self._nearly_caught_up(consumer, tr, partitions)
            now = time.monotonic()
            if caught_up and (now - last_poll >= self.o.poll_interval_s
                              or (self.o.until_idle and idle)):
                self._poll(consumer, reader, tr, partitions)
                last_poll = last_status = time.monotonic()
                if self.o.until_idle and idle:
                    return
            elif now - last_status >= self.o.poll_interval_s:
                self._status_line(consumer, tr, partitions)
                last_status = now

    def _nearly_caught_up(self, consumer: Any, tr: Translator, partitions: list[int]) -> bool:
        """Busy, but live: at most one batch behind, and the newest record read is recent (a
        follower reading history is never this, however few records are left)."""
        latest = tr.latest_record_ts
        if latest is None or latest < self.clock() - self.o.poll_interval_s * 1000:
            return False
        lag = self._lag(consumer, tr, partitions)
        return lag is not None and lag <= self.o.batch_records

    def _lag(self, consumer: Any, tr: Translator, partitions: list[int]) -> int | None:
        """Records of the offsets topic not read yet, from the watermarks the last fetches
        brought (no request); None when not known yet."""
        total = 0
        for tp in consumer.position([self.ck.TopicPartition(tr.offsets_topic, p)
                                     for p in partitions]):
            _, high = consumer.get_watermark_offsets(tp, cached=True)
            if high < 0:
                return None
            total += max(high - tp.offset, 0) if tp.offset >= 0 else high
        return total

    def _poll(self, consumer: Any, reader: Any, tr: Translator, partitions: list[int]) -> None:
        queues = set(tr.followed) | {(tr.offsets_topic, p) for p in partitions}
        bounds = self._bounds(reader, queues)
        if bounds:
            self._send(bounds_commands(bounds, tr.source), {}, tr.group)
        self.status.polls += 1
        self._status_line(consumer, tr, partitions)

    def _bounds(self, reader: Any, queues: set[tuple[str, int]]
                ) -> dict[tuple[str, int], tuple[int, int, int | None]]:
        """Per queue: earliest offset, latest offset and the newest message's time (read from
        the last message; None when there is none to read, as after a transaction marker). A
        consumer of its own: the follower's has a fetch waiting at each broker, which a
        watermark request would queue behind (0.5 s each)."""
        tp = self.ck.TopicPartition
        marks: dict[tuple[str, int], tuple[int, int]] = {}
        for topic, p in sorted(queues):
            try:
                low, high = reader.get_watermark_offsets(tp(topic, p),
                                                         timeout=METADATA_TIMEOUT_S)
            except self.ck.KafkaException as e:  # a topic deleted, a partition gone: said once
                if (topic, p) not in self._unmarked:
                    self._unmarked.add((topic, p))
                    self.out(f"no watermarks for {topic}:{p} ({e}): its bounds are not recorded")
                continue
            self._unmarked.discard((topic, p))
            marks[(topic, p)] = (low, high)
        newest: dict[tuple[str, int], int] = {}
        wanted = {q: high - 1 for q, (low, high) in marks.items() if high > low}
        if wanted:
            reader.assign([tp(t, p, off) for (t, p), off in wanted.items()])
            deadline = time.monotonic() + NEWEST_TIMEOUT_S
            left = set(wanted)
            while left and time.monotonic() < deadline and not self.stop.is_set():
                for m in reader.consume(num_messages=len(left), timeout=0.2):
                    q = (m.topic(), m.partition())
                    if m.error() is not None:
                        if m.error().code() == self.ck.KafkaError._PARTITION_EOF:
                            left.discard(q)
                        continue
                    kind, ts = m.timestamp()
                    if kind != self.ck.TIMESTAMP_NOT_AVAILABLE and q in left:
                        newest[q] = ts
                    left.discard(q)
            reader.unassign()
        return {q: (low, high, newest.get(q)) for q, (low, high) in marks.items()}

    def _status_line(self, consumer: Any, tr: Translator, partitions: list[int]) -> None:
        lag = self._lag(consumer, tr, partitions)
        self.status.lag_records = lag
        self.status.counts = tr.counts.as_dict()
        c = tr.counts
        self.out(f"{iso(self.clock())} follow {tr.source}: {c.records} records read "
                 f"({c.commits} commits, {c.undecodable} undecodable), "
                 f"{len(tr.groups_seen)} groups, lag {lag if lag is not None else '?'} "
                 f"records behind {tr.offsets_topic}")


class _Stopped(Exception):
    """A stop came while waiting for a part to come back."""
