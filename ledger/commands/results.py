"""Results of commands: one msgspec Struct per kind of answer, encoded as the JSON objects that
`apply` prints (one per input line), the server answers and the typed methods return.

`line` is the command's position in its batch (1-based), `op` its op (absent when the line could
not be decoded), `seq` the seq of its last event once durable (absent when it wrote none or was
refused), `error` why it failed or was refused, `refused` the rule that refused it where a rule
did (a commit says it in `reason`).
"""

from __future__ import annotations

from typing import Any

import msgspec


class Result(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False):
    line: int = 0  # 0 (left out): an answer to one command, not a line of a batch
    op: str | None = None
    seq: int | None = None
    error: str | None = None
    refused: str | None = None


class PullResult(Result, kw_only=True, omit_defaults=True, gc=False):
    next_offset: int
    generation: int
    count: int


class CommitResult(Result, kw_only=True, omit_defaults=True, gc=False):
    accepted: bool
    reason: str | None
    offset: int | None


class QueueResult(Result, kw_only=True, omit_defaults=True, gc=False):
    topic: str
    queue_id: int
    min_offset: int
    max_offset: int


class SyncResult(Result, kw_only=True, omit_defaults=True, gc=False):
    consumer_group: str
    topic: str
    queue_id: int
    from_offset: int | None
    to_offset: int | None
    changed: bool


class GroupResult(Result, kw_only=True, omit_defaults=True, gc=False):
    consumer_group: str
    mode: str
    initial: str
    client_timeout_ms: int


class GroupDeleteResult(Result, kw_only=True, omit_defaults=True, gc=False):
    consumer_group: str
    queues_deleted: int


class ResetResult(Result, kw_only=True, omit_defaults=True, gc=False):
    """A reset's plan (what `reset --json` prints), executed or not."""

    consumer_group: str
    executed: bool
    plan: list[dict[str, Any]]
    messages_replayed: int
    messages_skipped: int
    skipped_queues: list[dict[str, Any]] = msgspec.field(default_factory=list)
    ignored_groups: list[str] = msgspec.field(default_factory=list)
    policy: str | None = None  # a dry run the reset policy would refuse: why
    # the scenario planned ({mode, value?, backward_only?}): with the plan, the reviewed plan
    # that `reset --export-plan` writes and `reset --from-file` executes
    scenario: dict[str, Any] | None = None
    # targets the queue's bounds moved: {topic, queue_id, requested, to_offset, warning}
    clamped: list[dict[str, Any]] = msgspec.field(default_factory=list)


def to_dict(result: Result) -> dict[str, Any]:
    """The JSON object of a result, as a dict (the `apply` form)."""
    return msgspec.to_builtins(result)


def result_doc(result: Result) -> dict[str, Any]:
    """One command's result as the CLI prints it and a route answers it: its `apply` object
    without the line number and op."""
    doc = to_dict(result)
    doc.pop("line", None)
    doc.pop("op", None)
    return doc


#: The result type of each op (what `from_doc` decodes an `apply` object into).
RESULT_TYPES: dict[str, type[Result]] = {
    "pull": PullResult, "commit": CommitResult, "queue_append": QueueResult,
    "queue_truncate": QueueResult, "queue_bounds": QueueResult, "sync": SyncResult,
    "group_set": GroupResult, "group_delete": GroupDeleteResult, "reset": ResetResult}


def from_doc(doc: dict[str, Any]) -> Result:
    """An `apply` object (as a server answers it) as its typed result; a failed command's
    object, which lacks its op's fields, as a plain Result."""
    kind = RESULT_TYPES.get(doc.get("op") or "", Result)
    try:
        return msgspec.convert(doc, kind)
    except msgspec.ValidationError:
        return msgspec.convert({k: doc[k] for k in Result.__struct_fields__ if k in doc}, Result)
