"""`iso_column` (the times of a history document, a column at a time) says exactly what `iso`
says of each value, nulls and chunks included, from the epoch to the last printable instant."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.limits import TS_MAX
from ledger.timeparse import iso, iso_column

times = st.one_of(st.none(), st.integers(0, TS_MAX),
                  st.sampled_from([0, 1, 999, 1_000, 59_999, 60_000, 86_399_999, TS_MAX]))


@settings(max_examples=200, deadline=None)
@given(values=st.lists(times, max_size=60), cut=st.integers(0, 60))
def test_iso_column_equals_iso_of_each_value(values, cut):
    want = [iso(v) for v in values]
    assert iso_column(pa.array(values, pa.int64())) == want
    cut = min(cut, len(values))
    chunked = pa.chunked_array([pa.array(values[:cut], pa.int64()),
                                pa.array(values[cut:], pa.int64())])
    assert iso_column(chunked) == want
