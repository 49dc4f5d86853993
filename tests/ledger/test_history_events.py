"""`history_events` (what `GET /v1/history` encodes, built a column at a time as structs)
encodes to exactly the bytes of `event_doc` of each event, and `history_doc` is those events
as dicts: nulls, all-null columns, quotes and non-ASCII text included."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.limits import TS_MAX
from ledger.reads.documents import encode_json, event_doc, history_doc, history_events
from ledger.reads.events import EVENTS_SCHEMA

texts = st.one_of(st.none(), st.text(max_size=12), st.sampled_from(['a"b', "c\\d", "é\n\t"]))
ints = st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1))
events = st.fixed_dictionaries({
    "seq": st.integers(0, 2**62), "ts": st.integers(0, TS_MAX),
    "kind": st.sampled_from(["commit", "pull", "reset", "sync", "queue_append"]),
    "consumer_group": texts, "topic": texts, "queue_id": ints, "offset": ints,
    "prev_offset": ints, "generation": ints, "client_id": texts, "actor": texts,
    "store_ts": st.one_of(st.none(), st.integers(0, TS_MAX)), "detail": texts,
})


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(events, max_size=30), all_null=st.sampled_from(
    [None, "actor", "detail", "store_ts", "consumer_group"]))
def test_history_events_encode_as_event_doc_does(rows, all_null):
    if all_null is not None:
        for row in rows:
            row[all_null] = None
    table = pa.Table.from_pylist(rows, schema=EVENTS_SCHEMA)
    want = [event_doc(row) for row in rows]
    assert encode_json(history_events(table)) == encode_json(want)
    assert history_doc(table) == want
