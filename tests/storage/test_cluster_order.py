"""The seal's clustering sort (integer ranks and numpy's lexsort) orders rows exactly as Arrow's
multi-key sort does: by the clustering columns, then seq, nulls last, whatever the types, with
seq ascending (a segment as the log wrote it: the packed sort) or not (lexsort)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.sealed import cluster_order

names = st.one_of(st.none(), st.sampled_from(["", "a", "b", "ab", "é", "group-10", "group-9"]))
small_ints = st.one_of(st.none(), st.integers(-3, 3))
big_ints = st.one_of(st.none(), st.sampled_from([-(2**63), -1, 0, 2**62, 2**63 - 1]))


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(names, small_ints, big_ints), max_size=40),
       columns=st.lists(st.sampled_from(["group", "queue", "big"]), min_size=1, max_size=3,
                        unique=True),
       data=st.data())
def test_cluster_order_equals_arrows_sort(rows, columns, data):
    seqs = data.draw(st.permutations(range(len(rows))))
    if data.draw(st.booleans()):
        seqs = sorted(seqs)
    table = pa.table({
        "seq": pa.array(seqs, pa.int64()),
        "group": pa.array([r[0] for r in rows], pa.string()),
        "queue": pa.array([r[1] for r in rows], pa.int32()),
        "big": pa.array([r[2] for r in rows], pa.int64()),
    })
    keys = [(name, "ascending", "at_end") for name in (*columns, "seq")]
    assert cluster_order(table, columns).equals(table.take(pc.sort_indices(table, sort_keys=keys)))
