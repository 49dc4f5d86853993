"""`decode_document` of a JSON array decodes a valid array in one call (`_whole_array`); whatever
the array holds, its answer is the one of decoding each item alone with `from_json`: the same
commands, and the same error in place of each bad item."""

from __future__ import annotations

import msgspec
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ledger.commands.command import decode_document, from_json
from ledger.errors import InvalidInput

ITEMS = [
    b'{"op":"commit","group":"g1","topic":"t","queue_id":0,"offset":5}',
    b'{"op":"commit","group":"g2","topic":"t","queue_id":3,"offset":7,"client":"c-1"}',
    b'{"op":"pull","group":"g1","topic":"t","queue_id":1,"client":"c-2","max":32}',
    b'{"op":"queue_append","topic":"t","queue_id":0,"count":10}',
    b'{"op":"group_set","group":"g3","mode":"broadcast"}',
    b'{"op":"sync","group":"g1","topic":"t","queue_id":0,"offset":3,"source":"broker-a"}',
    b'{"op":"reset","group":"g1","topics":["t","u"],"to_earliest":true,"reason":"r"}',
    b'{"op":"reset","group":"g1","topic":"t","to_offset":0,"execute":true,"reason":"r",'
    b'"plan":[{"consumer_group":"g1","topic":"t","queue_id":0,"from_offset":3,"to_offset":0}]}',
    b'{"op":"reset","group":"g1","topic":"t","to_offset":0,"execute":true,"reason":"INC: 42"}',
    # refused items: each must be answered alone, in its place
    b'{"op":"commit","group":"g1","topic":"t","queue_id":0,"offset":5,"offset":9}',
    b'{"op":"commit","group":"bad name","topic":"t","queue_id":0,"offset":5}',
    b'{"op":"commit","group":"g1","topic":"t","queue_id":-1,"offset":5}',
    b'{"op":"commit","group":"g1","topic":"t","queue_id":0}',
    b'{"op":"commit","group":"g1","topic":"t","queue_id":0,"offset":5,"colour":"red"}',
    b'{"op":"nope","group":"g1"}',
    b'{"group":"g1","topic":"t","queue_id":0,"offset":5}',
    b'{"op":"pull","group":"g1","topic":"t:x","queue_id":0,"client":"c"}',
    b'{"op":"commit","group":"g1","topic":"t","queue_id":0,"offset":5,"owner_only":true}',
    b'{"op":"reset","group":"g1","topic":"t","execute":true}',
    b'{"op":"commit","group":"g\\u00e9","topic":"t","queue_id":0,"offset":5}',
    b'17',
    b'"commit"',
    b'{}',
]


def _one_by_one(body: bytes) -> list[object]:
    """The reference: each item of the array decoded alone."""
    out: list[object] = []
    for item in msgspec.json.decode(body, type=list[msgspec.Raw]):
        try:
            out.append(from_json(bytes(item)))
        except InvalidInput as e:
            out.append(e)
    return out


def _shown(results: list[object]) -> list[object]:
    return [f"error: {r}" if isinstance(r, InvalidInput) else r for r in results]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(range(len(ITEMS))), max_size=12), st.sampled_from([b",", b", "]))
@example([0, 1, 2, 3, 4, 5, 6], b",")  # all valid, no nested object: the one-call path
@example([0, 7, 8], b",")  # a nested object, a colon in a string: item by item
@example([0, 9, 1], b",")  # a key twice in one item
def test_an_array_answers_as_its_items_decoded_one_by_one(picks: list[int], sep: bytes) -> None:
    body = b"[" + sep.join(ITEMS[i] for i in picks) + b"]"
    assert _shown(decode_document(body)) == _shown(_one_by_one(body))


def test_a_valid_array_of_flat_commands_is_decoded_whole() -> None:
    # the one-call path answers it (an item-by-item decode is not called)
    import ledger.commands.command as command

    body = b"[" + b",".join(ITEMS[:7]) + b"]"
    calls = []
    real = command.from_json
    command.from_json = lambda *a, **k: calls.append(a) or real(*a, **k)  # type: ignore[assignment]
    try:
        decoded = decode_document(body)
    finally:
        command.from_json = real  # type: ignore[assignment]
    assert calls == [] and len(decoded) == 7
    assert _shown(decoded) == _shown(_one_by_one(body))
