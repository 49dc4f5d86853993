"""Where a group stands on each of its queues now, from the in-memory state (no DuckDB, no log):
the generation, whether a reset waits for the next pull, the committed offset and the client of
the last pull (the queue's owner). A consumer asks it for all its queues at once every second or
so, to follow a reset without waiting for a fenced commit (server/kafka_consumer.py), so it
costs a dictionary lookup per queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import msgspec

from ledger.commands.command import QueueId, parse_topic_spec
from ledger.errors import InvalidInput
from ledger.fold.state import State
from ledger.limits import GENERATIONS_QUEUES_MAX, check_name, check_queue_id


class QueueRef(msgspec.Struct, forbid_unknown_fields=True, frozen=True, gc=False):
    """A queue named in the question."""

    topic: str
    queue_id: QueueId


class QueueGeneration(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    """One queue of a group: `generation` goes up with every applied reset; `pending` is true
    from a reset until the next pull; `last_client` pulled last (commits with `owner_only` from
    any other client are fenced)."""

    topic: str
    queue_id: int
    generation: int
    pending: bool
    committed_offset: int | None
    last_client: str | None


class GenerationsQuery(msgspec.Struct, forbid_unknown_fields=True, frozen=True, gc=False):
    """The body of `POST /v1/groups/{group}/generations`: the queues asked about (absent: every
    queue where the group has a position)."""

    queues: Annotated[list[QueueRef], msgspec.Meta(max_length=GENERATIONS_QUEUES_MAX)] | None = None


def generations(state: State, group: str, queues: Sequence[QueueRef | tuple[str, int]] | None,
                now_ms: int, topic: str | None = None) -> list[QueueGeneration]:
    """Each queue's position of `group`, in the order asked (every queue of the group, sorted,
    when `queues` is None; `topic`, `T` or `T:0,2`, narrows that). A queue where the group has
    no position yet: generation 0, nothing committed, no client."""
    check_name(group, "group")
    if queues is not None and topic is not None:
        raise InvalidInput("name the queues or a topic, not both")
    if queues is None:
        name, ids = parse_topic_spec(topic) if topic is not None else (None, None)
        keys = sorted(k for k in state.positions if k[0] == group
                      and (name is None or k[1] == name) and (ids is None or k[2] in ids))
        if ids is not None:  # named queues are answered even where the group has no position
            keys = [(group, name, q) for q in ids]  # type: ignore[misc]
    else:
        if len(queues) > GENERATIONS_QUEUES_MAX:
            raise InvalidInput(f"{len(queues)} queues in one question: at most "
                               f"{GENERATIONS_QUEUES_MAX}")
        keys = []
        for q in queues:
            topic, queue_id = (q.topic, q.queue_id) if isinstance(q, QueueRef) else q
            keys.append((group, check_name(topic, "topic"), check_queue_id(queue_id)))
    out = []
    for key in keys:
        pos = state.positions.get(key)
        out.append(QueueGeneration(
            topic=key[1], queue_id=key[2], generation=pos.generation if pos else 0,
            pending=pos is not None and pos.pending, committed_offset=state.committed(key, now_ms),
            last_client=pos.last_client if pos else None))
    return out
