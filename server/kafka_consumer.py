"""`LedgerConsumer`: a Kafka consumer whose offsets live in the ledger (Kafka's "Storing Offsets
Outside Kafka", with RocketMQ's server-side reset; DESIGN.md, "Kafka consumers on the ledger").

Kafka still does group membership and assignment; the ledger is the offset store:
- On assignment, one pull of `max` 0 per partition (all in one request) says where each starts:
  a pending reset's target, the committed offset, or the group's initial policy for a group new
  to the ledger. The partitions are assigned at those offsets inside the callback (librdkafka
  ignores offsets changed on the list alone). The pull also makes this client the partition's
  owner in the ledger.
- `commit` sends each partition's offset with the generation of its last pull and `owner_only`:
  a commit from before a reset is fenced by its generation, one from a member whose partition
  moved to another member (a zombie) by the ownership; the ledger decides both.
- A fenced commit, or a newer generation seen by the periodic check (one request for all
  assigned partitions, every `reset_check_interval`, and at once after a fenced commit, so
  the partitions a reset moved follow together), is an operator's reset when this client
  still owns the partition: pull again, seek, and the application sees the messages again from
  the new position. When another client pulled the partition since, it is lost: paused (its
  messages are not delivered) until Kafka takes it away or hands it back. A partition Kafka
  still assigns here a session timeout after it was lost is pulled again (someone else's stray
  pull, not a rebalance).

One thread: every call, and the callbacks librdkafka runs inside `poll`, happen in the caller's
thread, as with `confluent_kafka.Consumer`.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import urllib3
from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from ledger.commands.results import CommitResult
from ledger.errors import InvalidInput
from ledger.limits import check_name, name_from
from ledger.reads.generations import QueueGeneration
from server.client import LedgerClient, ServerError

logger = logging.getLogger("offset_ledger.kafka_consumer")

TP = tuple[str, int]  # (topic, partition): a ledger queue
#: A ledger request that failed: the server answered an error or could not be reached.
LEDGER_ERRORS = (ServerError, urllib3.exceptions.HTTPError)
#: Delivery ranges remembered per partition, to commit a message under the generation it was
#: delivered in (a message from before a reset must stay fenced).
EPOCHS_KEPT = 16
#: How long a request to the ledger may take (the periodic check runs inside `poll`).
LEDGER_TIMEOUT_S = 10.0
SESSION_TIMEOUT_MS_DEFAULT = 45_000  # librdkafka's session.timeout.ms default

RebalanceCallback = Callable[[Consumer, list[TopicPartition]], None]


@dataclass(slots=True)
class _Partition:
    """What this consumer knows of one partition: the generation and start of its last pull,
    what it delivered since (`position`: the next offset to deliver) and what the ledger
    accepted."""

    generation: int
    start: int
    position: int
    committed: int
    epochs: deque[tuple[int, int, int]] = field(default_factory=lambda: deque(maxlen=EPOCHS_KEPT))
    assigned: bool = True
    unpositioned: bool = False  # assigned by Kafka, start not known from the ledger yet
    lost_since: float | None = None  # when another client was seen owning it

    def begin(self, generation: int, offset: int) -> None:
        """A new start (assignment, reset): what was delivered before keeps its generation."""
        if self.position > self.start:
            self.epochs.append((self.generation, self.start, self.position))
        self.generation, self.start, self.position, self.committed = (generation, offset, offset,
                                                                      offset)
        self.assigned, self.unpositioned, self.lost_since = True, False, None

    def generation_of(self, offset: int) -> int | None:
        """The generation `offset` was delivered in (None: not delivered by this consumer)."""
        if self.start <= offset < self.position:
            return self.generation
        for generation, start, end in reversed(self.epochs):
            if start <= offset < end:
                return generation
        return None


@dataclass(frozen=True)
class PartitionCommit:
    """The ledger's answer to one partition's commit: `offset` (the next offset to consume)
    sent under `generation`; `result` says whether it was accepted and the committed offset."""

    topic: str
    partition: int
    offset: int
    generation: int
    result: CommitResult

    @property
    def accepted(self) -> bool:
        return self.result.accepted

    @property
    def reason(self) -> str | None:
        """None when accepted; else stale, invalid or fenced (a reset, or another owner)."""
        return self.result.reason


def _generated_client_id() -> str:
    """A client id of its own per consumer (the ledger tells owners apart by it)."""
    return name_from(f"ledger-consumer-{socket.gethostname()}-{os.getpid()}-"
                     f"{secrets.token_hex(3)}")


class LedgerConsumer:
    """A `confluent_kafka.Consumer` storing its offsets in the ledger at `ledger_url`.

    `kafka_config` is the consumer's configuration (`group.id` is the ledger group,
    `client.id` the ledger client id, generated when absent); Kafka auto-commit is turned off.
    `token`: a bearer token with the `consume` role for the group. `reset_check_interval`:
    seconds between generation checks. `kafka_commit`: also commit accepted offsets to Kafka
    (so Kafka's own tools see them); the ledger stays the offset store.
    """

    def __init__(self, kafka_config: dict[str, Any], ledger_url: str, *, token: str | None = None,
                 reset_check_interval: float = 1.0, kafka_commit: bool = False) -> None:
        config = dict(kafka_config)
        self.group = check_name(config.get("group.id"), "group.id")
        self.client_id = check_name(config.get("client.id") or _generated_client_id(),
                                    "client.id")
        if not reset_check_interval > 0:
            raise InvalidInput(f"invalid reset_check_interval {reset_check_interval!r}: "
                               "seconds, more than 0")
        config.update({"client.id": self.client_id, "enable.auto.commit": False,
                       "enable.auto.offset.store": False})
        self.reset_check_interval = float(reset_check_interval)
        self.kafka_commit = kafka_commit
        self._cooperative = "cooperative" in str(config.get("partition.assignment.strategy", ""))
        self._lost_grace_s = int(config.get("session.timeout.ms",
                                            SESSION_TIMEOUT_MS_DEFAULT)) / 1000
        self._ledger = LedgerClient(ledger_url, token=token, timeout_s=LEDGER_TIMEOUT_S)
        self.kafka = Consumer(config)
        """The wrapped consumer, for what this class does not wrap (metadata, watermarks)."""
        self._parts: dict[TP, _Partition] = {}
        self._next_check = 0.0
        self._error: BaseException | None = None  # a ledger failure inside a callback
        self._callbacks: dict[str, RebalanceCallback | None] = {}
        self._closed = False

    # ------------------------------------------------------------------ the consumer's API
    def subscribe(self, topics: Iterable[str], *, on_assign: RebalanceCallback | None = None,
                  on_revoke: RebalanceCallback | None = None,
                  on_lost: RebalanceCallback | None = None) -> None:
        """Join the group for `topics`; the application's own callbacks run after the
        partitions are positioned (assign) or before their offsets are committed (revoke,
        lost)."""
        self._callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        self.kafka.subscribe(list(topics), on_assign=self._on_assign, on_revoke=self._on_revoke,
                             on_lost=self._on_lost)

    def poll(self, timeout: float | None = None) -> Message | None:
        """The next message (or a Kafka error event, as the plain consumer gives it), None after
        `timeout` seconds (None: wait for one). Messages after a reset come from the new
        position. A ledger failure at assignment (unreachable, 403) is raised here."""
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        parts, kafka_poll = self._parts, self.kafka.poll  # (the per-message path: kept short)
        while True:
            if self._error is not None:
                self._raise_pending()
            now = time.monotonic()
            if now >= self._next_check:
                self._next_check = now + self.reset_check_interval
                self._check()
            wait = self._next_check - now
            if deadline is not None and deadline - now < wait:
                wait = deadline - now
            msg = kafka_poll(wait if wait > 0 else 0)
            if msg is not None:
                if msg.error() is not None:
                    return msg
                st = parts.get((msg.topic(), msg.partition()))
                if st is None:
                    return msg
                if st.assigned and not st.unpositioned and st.lost_since is None:
                    st.position = msg.offset() + 1
                    return msg
                continue  # a partition paused, lost or not positioned yet: not delivered
            if deadline is not None and time.monotonic() >= deadline:
                self._raise_pending()
                return None

    def commit(self, message: Message | None = None) -> list[PartitionCommit]:
        """Commit the offset after `message`, or of everything polled so far, to the ledger;
        the ledger's result per partition. A fenced commit is an answer, not an error: this
        consumer then follows the reset behind it (pull again, seek) or lets go of a
        partition another member owns now."""
        if message is not None:
            tp = (message.topic(), message.partition())
            st = self._parts.get(tp)
            generation = st.generation_of(message.offset()) if st is not None else None
            if st is None or generation is None:
                raise InvalidInput(f"message {tp[0]}:{tp[1]}@{message.offset()} was not "
                                   "delivered by this consumer")
            return self._commit([(tp[0], tp[1], message.offset() + 1, generation)])
        return self._commit(self._positions(self._parts))

    def close(self) -> None:
        """Commit what was polled (where the ledger still allows it), leave the group."""
        if self._closed:
            return
        self._closed = True
        try:
            self.commit()
        except LEDGER_ERRORS as e:
            logger.warning("%s: the final commit failed: %s", self.client_id, e)
        finally:
            try:
                self.kafka.close()  # revokes: the revoke callback commits nothing new
            finally:
                self._ledger.close()

    def unsubscribe(self) -> None:
        """Leave the topics: the revoke callback commits what was polled first."""
        self.kafka.unsubscribe()

    def assignment(self) -> list[TopicPartition]:
        return self.kafka.assignment()

    def __enter__(self) -> LedgerConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ rebalance callbacks
    def _on_assign(self, kafka: Consumer, partitions: list[TopicPartition]) -> None:
        tps = [(p.topic, p.partition) for p in partitions]
        try:
            pulls = self._ledger.pulls(self.group, tps, client=self.client_id, max=0)
        except LEDGER_ERRORS as e:
            # assigned all the same (else the client library assigns them at Kafka's offsets)
            # but paused and not delivered until the ledger says where they start
            self._error = e
            self._assign(kafka, partitions)
            kafka.pause(partitions)
            for tp in tps:
                st = self._parts.setdefault(tp, _Partition(0, 0, 0, 0))
                st.assigned, st.unpositioned = True, True
            logger.warning("%s: could not pull %d assigned partition(s) from the ledger: %s",
                           self.client_id, len(tps), e)
        else:
            paused = []
            for p, r in zip(partitions, pulls, strict=True):
                st = self._partition((p.topic, p.partition))
                if st.unpositioned or st.lost_since is not None:
                    paused.append(TopicPartition(p.topic, p.partition))
                p.offset = r.next_offset
                st.begin(r.generation, r.next_offset)
            self._assign(kafka, partitions)
            if paused:  # paused while lost or unpositioned: a partition stays paused in
                kafka.resume(paused)  # librdkafka across unassign and assign
        self._user("assign", kafka, partitions)

    def _on_revoke(self, kafka: Consumer, partitions: list[TopicPartition]) -> None:
        self._let_go(kafka, partitions, "revoke")

    def _on_lost(self, kafka: Consumer, partitions: list[TopicPartition]) -> None:
        self._let_go(kafka, partitions, "lost")

    def _let_go(self, kafka: Consumer, partitions: list[TopicPartition], why: str) -> None:
        """Revoked or lost: commit what was delivered (the ledger fences it where another
        member owns the partition already), then unassign."""
        try:
            self._user(why, kafka, partitions)
        finally:
            tps = {(p.topic, p.partition) for p in partitions}
            try:
                self._commit(self._positions({tp: self._parts[tp] for tp in tps
                                              if tp in self._parts}), follow=False)
            except LEDGER_ERRORS as e:
                logger.warning("%s: committing %s partition(s) failed: %s", self.client_id, why,
                               e)
            for tp in tps:
                if tp in self._parts:
                    self._parts[tp].assigned = False
            if self._cooperative:
                kafka.incremental_unassign(partitions)
            else:
                kafka.unassign()

    def _assign(self, kafka: Consumer, partitions: list[TopicPartition]) -> None:
        if self._cooperative:
            kafka.incremental_assign(partitions)
        else:
            kafka.assign(partitions)

    def _user(self, which: str, kafka: Consumer, partitions: list[TopicPartition]) -> None:
        callback = self._callbacks.get(which)
        if callback is not None:
            callback(kafka, partitions)

    # ------------------------------------------------------------------ offsets
    def _partition(self, tp: TP) -> _Partition:
        st = self._parts.get(tp)
        if st is None:
            st = self._parts[tp] = _Partition(0, 0, 0, 0)
        return st

    @staticmethod
    def _positions(parts: dict[TP, _Partition]) -> list[tuple[str, int, int, int]]:
        """What was delivered and not yet committed, per assigned partition."""
        return [(tp[0], tp[1], st.position, st.generation) for tp, st in sorted(parts.items())
                if st.assigned and not st.unpositioned and st.position > st.committed]

    def _commit(self, offsets: Sequence[tuple[str, int, int, int]], follow: bool = True
                ) -> list[PartitionCommit]:
        results = self._ledger.commits(self.group, offsets, client=self.client_id,
                                       owner_only=True)
        accepted, fenced = [], []
        for (topic, partition, offset, generation), r in zip(offsets, results, strict=True):
            st = self._parts[(topic, partition)]
            if r.accepted:
                if generation == st.generation:
                    st.committed = max(st.committed, offset)
                accepted.append(TopicPartition(topic, partition, offset))
            elif r.reason == "fenced":
                fenced.append((topic, partition))
            else:  # stale (another member went further) or invalid (above a MaxOffset known)
                logger.info("%s: commit of %s:%d at %d refused: %s", self.client_id, topic,
                            partition, offset, r.reason)
        if accepted and self.kafka_commit:
            try:
                self.kafka.commit(offsets=accepted, asynchronous=True)
            except KafkaException as e:  # Kafka's copy only: the ledger has them
                logger.info("%s: committing to Kafka failed: %s", self.client_id, e)
        if fenced and follow:  # an operator's reset is seldom of one partition alone: the
            self._check()      # periodic check now, for every assigned one, in one request
            self._next_check = time.monotonic() + self.reset_check_interval
        return [PartitionCommit(t, p, offset, generation, r)
                for (t, p, offset, generation), r in zip(offsets, results, strict=True)]

    # ------------------------------------------------------------------ following resets
    def _check(self) -> None:
        """The periodic check: position what the ledger could not position at assignment,
        then compare every assigned partition's generation and owner with the ledger's."""
        waiting = [tp for tp, st in self._parts.items() if st.assigned and st.unpositioned]
        if waiting:
            try:
                self._position(waiting)
            except LEDGER_ERRORS as e:
                self._error = e
                return
        assigned = sorted(tp for tp, st in self._parts.items() if st.assigned)
        if assigned:
            self._follow_quietly(assigned)

    def _follow_quietly(self, tps: list[TP]) -> None:
        """`_follow` the ledger's answer for `tps`; a failure is logged, the next periodic
        check tries again."""
        try:
            self._follow(self._ledger.generations(self.group, tps))
        except LEDGER_ERRORS as e:
            logger.warning("%s: the generation check failed: %s", self.client_id, e)

    def _follow(self, rows: list[QueueGeneration]) -> None:
        """Pull again (and seek) the partitions an operator reset while this client owns them;
        pause those another client owns now."""
        now = time.monotonic()
        again, held = [], {(p.topic, p.partition) for p in self.kafka.assignment()}
        for row in rows:
            tp = (row.topic, row.queue_id)
            st = self._parts.get(tp)
            if st is None or not st.assigned or st.unpositioned:
                continue
            if row.last_client in (None, self.client_id):
                if row.generation > st.generation:
                    again.append(tp)  # an operator's reset (or a group delete)
                continue
            if st.lost_since is None:  # another client pulled it: a rebalance moved it
                st.lost_since = now
                self.kafka.pause([TopicPartition(*tp)])
                logger.warning("%s: %s:%d is owned by %s now: paused until the group "
                               "rebalances", self.client_id, tp[0], tp[1], row.last_client)
            elif now - st.lost_since > self._lost_grace_s and tp in held:
                again.append(tp)  # Kafka still says it is ours: take it back
        if again:
            self._position(again)

    def _position(self, tps: list[TP]) -> None:
        """Pull `tps` from the ledger and seek each to where it starts now."""
        pulls = self._ledger.pulls(self.group, tps, client=self.client_id, max=0)
        for tp, r in zip(tps, pulls, strict=True):
            st = self._partition(tp)
            paused = st.unpositioned or st.lost_since is not None
            st.begin(r.generation, r.next_offset)
            try:
                self.kafka.seek(TopicPartition(tp[0], tp[1], r.next_offset))
            except KafkaException as e:  # not moved: held back until the next check seeks it
                st.unpositioned = True
                self.kafka.pause([TopicPartition(tp[0], tp[1])])
                logger.warning("%s: seeking %s:%d to %d failed: %s", self.client_id, tp[0],
                               tp[1], r.next_offset, e)
                continue
            if paused:
                self.kafka.resume([TopicPartition(tp[0], tp[1])])
            logger.info("%s: %s:%d from %d (generation %d)", self.client_id, tp[0], tp[1],
                        r.next_offset, r.generation)

    def _raise_pending(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error
